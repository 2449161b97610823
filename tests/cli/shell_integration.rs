//! `dsa-sim completions SHELL` and `dsa-sim man`, as a user runs them.

use std::process::{Command, Output};

fn dsa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().unwrap()
}

fn stdout(args: &[&str]) -> String {
    let o = dsa(args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

const COMMANDS: &[&str] = &[
    "recall",
    "rank",
    "calibrate",
    "verdict",
    "sweep",
    "run",
    "merge",
    "presets",
    "formats",
    "quantize",
    "completions",
    "man",
];

#[test]
fn completions_for_every_shell_name_every_command_and_field_flags() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let text = stdout(&["completions", shell]);
        for c in COMMANDS {
            assert!(text.contains(c), "{shell}: no {c}");
        }
        for flag in ["context-len", "index-topk", "q-format", "vary", "resume"] {
            assert!(text.contains(flag), "{shell}: no --{flag}");
        }
        // Twice the same: the scripts are generated, not timestamped.
        assert_eq!(text, stdout(&["completions", shell]));
    }
}

#[test]
fn bash_completion_is_valid_bash() {
    let text = stdout(&["completions", "bash"]);
    let Ok(mut child) = Command::new("bash")
        .arg("-n")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        return; // no bash on this machine
    };
    use std::io::Write;
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "bash -n: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn unknown_shell_is_bad_input() {
    let o = dsa(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("error: ") && err.contains("tcsh") && err.lines().count() == 1, "{err}");
    assert_eq!(dsa(&["completions"]).status.code(), Some(2));
}

#[test]
fn man_page_is_roff_with_every_command_and_ascii_only() {
    let text = stdout(&["man"]);
    assert!(text.starts_with(".ie") || text.starts_with(".TH") || text.contains("\n.TH dsa-sim"), "{}", &text[..200]);
    assert!(text.contains(".SH NAME"));
    assert!(text.contains(".SH SUBCOMMANDS") || text.contains(".SH COMMANDS"));
    for c in COMMANDS {
        assert!(text.contains(&format!(".SH \"DSA\\-SIM {}\"", c.to_uppercase())), "no section for {c}");
    }
    assert!(text.contains("\\-\\-context\\-len"), "field flags listed");
    assert!(text.is_ascii(), "non-ASCII characters are escaped");
    assert!(text.contains("\\[u2264]"), "≤ as a groff escape");
    assert_eq!(text, stdout(&["man"]));
}

#[test]
fn subcommands_of_import_have_man_sections_and_completions() {
    let text = stdout(&["man"]);
    for (c, flag) in [("IMPORT TOPK", "\\-\\-manifest"), ("IMPORT NIAH", "\\-\\-min\\-score")] {
        let at = text.find(&format!(".SH \"DSA\\-SIM {c}\"")).unwrap_or_else(|| panic!("no section for {c}"));
        assert!(text[at..].contains(flag), "{c}: no {flag}");
    }
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let t = stdout(&["completions", shell]);
        assert!(t.contains("import") && t.contains("topk") && t.contains("niah") && t.contains("manifest"), "{shell}");
    }
}

#[test]
fn man_page_renders_without_warnings_where_groff_exists() {
    let Ok(mut child) = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        return; // groff is not installed
    };
    use std::io::Write;
    child.stdin.take().unwrap().write_all(stdout(&["man"]).as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(out.stderr.is_empty(), "groff: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_full_disk_is_a_failure_not_a_silent_success() {
    let Ok(_) = std::fs::metadata("/dev/full") else { return };
    for args in [&["completions", "zsh"][..], &["man"][..]] {
        let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
            .args(args)
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.starts_with("error: ") && e.lines().count() == 1 && e.contains("stdout"), "{args:?}: {e}");
    }
}
