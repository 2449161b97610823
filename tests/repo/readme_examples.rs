//! The documentation's shell-session examples, run against the built binary.
//!
//! In README.md, experiments/README.md and docs/*.md, every line of a fenced code block that
//! starts with `$ dsa-sim …` (or `$ echo … | dsa-sim …`, `$ printf … | dsa-sim …`,
//! `$ seq … | dsa-sim …`) is an example: the lines after it, up to the next `$` line or the end
//! of the block, are its expected output (stdout, then stderr), and must be exactly what the
//! binary prints. A trailing group of comment lines, separated from the output by a blank line
//! (`# what the next example shows`), belongs to the next example, not to the output. Commands
//! are split into words as a shell would (single and double quotes, backslash escapes) but no
//! shell runs: the producer of a pipe is emulated, and any other shell syntax is refused.
//!
//! After a deliberate change of output, regenerate the expected outputs in place with
//!
//! ```sh
//! DSA_SIM_UPDATE_README=1 cargo test --release --test repo readme_examples
//! ```
//!
//! and review the diff.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One `$` example: where it is, what it runs, what it should print.
struct Example {
    file: PathBuf,
    /// 0-based index of the `$` line.
    line: usize,
    command: String,
    /// 0-based line range [start, end) of the expected output.
    output: (usize, usize),
    expected: Vec<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn documents() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("experiments/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "md")).collect()
        })
        .unwrap_or_default();
    docs.sort();
    files.extend(docs);
    files.into_iter().filter(|p| p.exists()).collect()
}

fn is_comment_or_blank(l: &str) -> bool {
    let t = l.trim();
    t.is_empty() || t == "#" || t.starts_with("# ")
}

/// Every `$` example of a markdown text.
fn examples(file: &Path, text: &str) -> Vec<Example> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with("```") {
            i += 1;
            continue;
        }
        // A fenced block: lines i+1 .. end.
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].trim_start().starts_with("```") {
            end += 1;
        }
        let mut j = start;
        while j < end {
            let Some(command) = lines[j].strip_prefix("$ ") else {
                j += 1;
                continue;
            };
            let mut k = j + 1;
            while k < end && !lines[k].starts_with("$ ") {
                k += 1;
            }
            // Leave out a trailing commentary group that starts with a blank line.
            let mut stop = k;
            if let Some(b) =
                (j + 1..k).find(|&b| lines[b].trim().is_empty() && lines[b..k].iter().all(|l| is_comment_or_blank(l)))
            {
                stop = b;
            }
            out.push(Example {
                file: file.to_path_buf(),
                line: j,
                command: command.trim().to_string(),
                output: (j + 1, stop),
                expected: lines[j + 1..stop].iter().map(|s| s.to_string()).collect(),
            });
            j = k;
        }
        i = end + 1;
    }
    out
}

/// Splits a command line into words as a POSIX shell would (quotes and backslashes), with the
/// unquoted pipe `|` as a word of its own. Other shell syntax is refused.
fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '|' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                words.push("|".to_string());
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c @ ('$' | '`')) => return Err(format!("`{c}` inside double quotes is not supported")),
                        Some(c) => cur.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push(c),
                    None => return Err("a trailing backslash (line continuation) is not supported".into()),
                }
            }
            ';' | '&' | '<' | '>' | '$' | '`' | '(' | ')' | '*' | '?' | '~' => {
                return Err(format!("shell syntax `{c}` is not supported in a tested example"))
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// `printf FORMAT` with the escapes \n, \t, \\ and %% (no arguments, no other conversions).
fn printf(args: &[String]) -> Result<String, String> {
    let [format] = args else {
        return Err("printf: give exactly one argument (the text)".into());
    };
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('\\') => out.push('\\'),
                other => return Err(format!("printf: escape \\{} is not supported", other.unwrap_or(' '))),
            },
            '%' => match chars.next() {
                Some('%') => out.push('%'),
                _ => return Err("printf: conversions are not supported".into()),
            },
            c => out.push(c),
        }
    }
    Ok(out)
}

/// A decimal number as (scaled integer, fractional digits).
fn decimal(s: &str) -> Result<(i128, u32), String> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty() || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return Err(format!("seq: `{s}` is not a plain decimal number"));
    }
    let digits = format!("{int}{frac}");
    let v: i128 = digits.parse().map_err(|_| format!("seq: `{s}` is too long"))?;
    Ok((if neg { -v } else { v }, frac.len() as u32))
}

/// `seq [FIRST [STEP]] LAST` as GNU seq prints it for plain decimals: every value
/// FIRST + i·STEP ≤ LAST, with as many decimals as FIRST or STEP has.
fn seq(args: &[String]) -> Result<String, String> {
    let (first, step, last) = match args {
        [l] => ("1", "1", l.as_str()),
        [f, l] => (f.as_str(), "1", l.as_str()),
        [f, s, l] => (f.as_str(), s.as_str(), l.as_str()),
        _ => return Err("seq: give 1 to 3 arguments".into()),
    };
    let (f, s, l) = (decimal(first)?, decimal(step)?, decimal(last)?);
    let scale = f.1.max(s.1).max(l.1);
    let up = |(v, d): (i128, u32)| v * 10i128.pow(scale - d);
    let (f, s, l, shown) = (up(f), up(s), up(l), f.1.max(s.1));
    if s <= 0 {
        return Err("seq: only a positive step is supported".into());
    }
    let mut out = String::new();
    let mut v = f;
    while v <= l {
        let div = 10i128.pow(scale);
        let (q, r) = (v.abs() / div, v.abs() % div);
        let sign = if v < 0 { "-" } else { "" };
        if shown == 0 {
            out.push_str(&format!("{sign}{q}\n"));
        } else {
            let frac = format!("{:0width$}", r, width = scale as usize);
            out.push_str(&format!("{sign}{q}.{}\n", &frac[..shown as usize]));
        }
        v += s;
    }
    Ok(out)
}

/// Runs one example's command; returns stdout followed by stderr.
fn run(command: &str) -> Result<String, String> {
    let words = split_words(command)?;
    let parts: Vec<&[String]> = words.split(|w| w == "|").collect();
    let (stdin, cmd): (Option<String>, &[String]) = match parts.as_slice() {
        [cmd] => (None, cmd),
        [producer, cmd] => {
            let (name, args) = producer.split_first().ok_or("empty command before `|`")?;
            let text = match name.as_str() {
                "echo" => {
                    if args.iter().any(|a| a.starts_with('-')) {
                        return Err("echo: options are not supported".into());
                    }
                    args.join(" ") + "\n"
                }
                "printf" => printf(args)?,
                "seq" => seq(args)?,
                other => return Err(format!("`{other} | …`: only echo, printf and seq can feed a tested example")),
            };
            (Some(text), cmd)
        }
        _ => return Err("at most one pipe is supported".into()),
    };
    let (name, args) = cmd.split_first().ok_or("empty command")?;
    if name != "dsa-sim" {
        return Err(format!("`{name}`: a tested example runs dsa-sim"));
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .args(args)
        .current_dir(root())
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start dsa-sim: {e}"))?;
    if let Some(text) = stdin {
        child.stdin.take().expect("piped stdin").write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    if !out.status.success() && !text.contains("error: ") {
        return Err(format!("exit status {} without an error line", out.status));
    }
    Ok(text)
}

fn output_lines(text: &str) -> Vec<String> {
    text.lines().map(|l| l.trim_end().to_string()).collect()
}

#[test]
fn documented_examples_print_what_they_show() {
    let update = std::env::var_os("DSA_SIM_UPDATE_README").is_some_and(|v| !v.is_empty() && v != "0");
    let mut failures = Vec::new();
    let mut total = 0;
    for file in documents() {
        let text = std::fs::read_to_string(&file).unwrap();
        let list = examples(&file, &text);
        total += list.len();
        let mut lines: Vec<String> = text.lines().map(String::from).collect();
        // Bottom to top, so earlier line numbers stay valid while outputs are replaced.
        for ex in list.iter().rev() {
            let started = Instant::now();
            let result = run(&ex.command);
            let secs = started.elapsed().as_secs_f64();
            let at = format!("{}:{}", ex.file.strip_prefix(root()).unwrap_or(&ex.file).display(), ex.line + 1);
            if secs > 1.0 {
                eprintln!("{at}: `{}` took {secs:.2} s; keep documented examples well under a second", ex.command);
            }
            let actual = match result {
                Ok(t) => output_lines(&t),
                Err(e) => {
                    failures.push(format!("{at}: `{}`: {e}", ex.command));
                    continue;
                }
            };
            if actual != ex.expected {
                if update {
                    lines.splice(ex.output.0..ex.output.1, actual);
                } else {
                    let first = actual
                        .iter()
                        .zip(&ex.expected)
                        .position(|(a, e)| a != e)
                        .unwrap_or(actual.len().min(ex.expected.len()));
                    failures.push(format!(
                        "{at}: `{}` prints something else (first difference at output line {}):\n--- documented\n{}\n--- actual\n{}",
                        ex.command,
                        first + 1,
                        ex.expected.join("\n"),
                        actual.join("\n")
                    ));
                }
            }
        }
        if update {
            let mut new = lines.join("\n");
            if text.ends_with('\n') {
                new.push('\n');
            }
            if new != text {
                std::fs::write(&file, new).unwrap();
                eprintln!("updated {}", file.display());
            }
        }
    }
    assert!(total >= 8, "found only {total} documented examples: did the `$ dsa-sim` convention change?");
    assert!(
        failures.is_empty(),
        "{} documented example(s) out of date (DSA_SIM_UPDATE_README=1 cargo test --release --test repo readme_examples \
         regenerates the outputs):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_shell_emulation_matches_a_shell() {
    assert_eq!(
        split_words(r#"echo "0.3 5.5" 'a b' c\ d | dsa-sim x"#).unwrap(),
        ["echo", "0.3 5.5", "a b", "c d", "|", "dsa-sim", "x"]
    );
    assert!(split_words("dsa-sim recall > out.txt").is_err());
    assert!(split_words("dsa-sim recall; rm -rf x").is_err());
    assert_eq!(printf(&[r"1 2\n3".into()]).unwrap(), "1 2\n3");
    assert!(printf(&["%s".into(), "x".into()]).is_err());
    // GNU seq: decimals of FIRST and STEP, LAST included when reached exactly.
    assert_eq!(seq(&["3".into()]).unwrap(), "1\n2\n3\n");
    assert_eq!(seq(&["0".into(), "0.5".into(), "2.25".into()]).unwrap(), "0.0\n0.5\n1.0\n1.5\n2.0\n");
    let s = seq(&["0".into(), "0.375".into(), "11.625".into()]).unwrap();
    assert_eq!(s.lines().count(), 32);
    assert!(s.starts_with("0.000\n0.375\n0.750\n") && s.ends_with("11.625\n"));
    assert_eq!(seq(&["0".into(), "0.37".into(), "12".into()]).unwrap().lines().count(), 33);
}

#[test]
fn examples_are_found_with_their_outputs_and_without_the_commentary() {
    let md = "text\n```sh\n# first\n$ dsa-sim a\nout 1\n\nout 2\n\n# the next one\n$ dsa-sim b\n$ dsa-sim c\nx\n```\n$ dsa-sim not-in-a-block\n";
    let ex = examples(Path::new("x.md"), md);
    let got: Vec<(&str, Vec<String>)> = ex.iter().map(|e| (e.command.as_str(), e.expected.clone())).collect();
    assert_eq!(
        got,
        vec![
            ("dsa-sim a", vec!["out 1".to_string(), String::new(), "out 2".to_string()]),
            ("dsa-sim b", vec![]),
            ("dsa-sim c", vec!["x".to_string()]),
        ]
    );
}

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).env("COLUMNS", "100").output().unwrap();
    assert!(out.status.success(), "dsa-sim {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// Every example command in `--help` (top level and per command) stays one line at 100 columns,
/// or continues with ` \`, so that it can be pasted into a shell.
#[test]
fn help_examples_paste_at_100_columns() {
    let top = help(&["--help"]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 9, "commands found: {commands:?}");
    let mut pages = vec![("dsa-sim".to_string(), top)];
    for c in &commands {
        pages.push((format!("dsa-sim {c}"), help(&[c, "--help"])));
    }
    let mut examples = 0;
    for (name, page) in &pages {
        let lines: Vec<&str> = page.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let l = lines[i];
            assert!(l.chars().count() <= 100, "{name} --help: line longer than 100 columns: {l:?}");
            let t = l.trim_start();
            let is_example = t.starts_with("dsa-sim ")
                || ["echo ", "seq ", "printf "].iter().any(|p| t.starts_with(p)) && t.contains("| dsa-sim ");
            if !is_example {
                i += 1;
                continue;
            }
            examples += 1;
            let indent = l.len() - t.len();
            // Continuation lines, then the next line must not be the wrapped tail of this command.
            while lines[i].trim_end().ends_with('\\') {
                i += 1;
                assert!(i < lines.len(), "{name} --help: example ends with a continuation: {l:?}");
            }
            if let Some(next) = lines.get(i + 1) {
                let nt = next.trim_start();
                let same_indent = next.len() - nt.len() == indent;
                assert!(
                    nt.is_empty() || !same_indent || nt.starts_with("dsa-sim ") || nt.contains("| dsa-sim "),
                    "{name} --help: the example {l:?} wraps onto {next:?} at 100 columns (use one line or ` \\` continuations)"
                );
            }
            i += 1;
        }
    }
    assert!(examples >= 20, "only {examples} help examples found");
}

/// The paragraphs of a markdown text outside code blocks, each as its lines: a blank line, a
/// heading, a bullet or a table row starts a new one.
fn paragraphs(text: &str) -> Vec<Vec<&str>> {
    let (mut out, mut cur, mut fenced): (Vec<Vec<&str>>, Vec<&str>, bool) = (Vec::new(), Vec::new(), false);
    for line in text.lines() {
        let t = line.trim_start();
        let breaks =
            t.is_empty() || t.starts_with("```") || t.starts_with('#') || t.starts_with("- ") || t.starts_with('|');
        if fenced || breaks {
            out.extend((!cur.is_empty()).then(|| std::mem::take(&mut cur)));
        }
        if t.starts_with("```") {
            fenced = !fenced;
        } else if t.starts_with('#') && !fenced {
            out.push(vec![line]);
        } else if !fenced && !t.is_empty() {
            cur.push(line);
        }
    }
    out.extend((!cur.is_empty()).then_some(cur));
    out
}

#[test]
// Issue 41: a README a newcomer reads (at most 300 lines) and an ARCHITECTURE.md of short
// paragraphs (at most 6 lines each; a module's invariants go in bullets).
fn the_docs_keep_their_shape() {
    let read = |f: &str| std::fs::read_to_string(root().join(f)).unwrap();
    let readme = read("README.md");
    assert!(readme.lines().count() <= 300, "README.md has {} lines", readme.lines().count());
    let arch = read("ARCHITECTURE.md");
    let long: Vec<String> =
        paragraphs(&arch).iter().filter(|p| p.len() > 6).map(|p| format!("{} lines: {}", p.len(), p[0])).collect();
    assert!(long.is_empty(), "ARCHITECTURE.md paragraphs over 6 lines:\n{}", long.join("\n"));
    // The splitter itself: a fenced block and a bullet end a paragraph; a continued bullet is one.
    let p = paragraphs("a\nb\n```\nc\n```\n- d\n  e\n\n# f\ng");
    assert_eq!(p, vec![vec!["a", "b"], vec!["- d", "  e"], vec!["# f"], vec!["g"]]);
}
