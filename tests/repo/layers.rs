//! The library's layering: which top-level modules each module imports (`crate::X` paths in code,
//! comments and string literals left out), checked to form no cycle, with the command line
//! (`src/cli/`, `src/main.rs`) a leaf that nothing in the library imports.
//!
//! `cargo test --test repo layers:: -- --nocapture` prints the graph, lowest layer first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common;

/// The source with comments, string and character literals blanked out (code only).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if b[i] == b'r'
            && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#"))
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric() && b[i - 1] != b'_')
        {
            // Raw string r#"…"#: skip to the closing quote followed by as many hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if j < b.len() && b[j] == b'"' {
                let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                i = j + close.len();
                out.push_str("\"\"");
            } else {
                out.push('r');
                i += 1;
            }
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && i + 2 < b.len() && (b[i + 2] == b'\'' || b[i + 1] == b'\\') {
            // A character literal ('x' or '\n'); a lifetime ('a) has no closing quote.
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            let c = src[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The top-level modules a file's code names: `crate::X…` and `crate::{X, Y…}`.
fn imports(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(p) = rest.find("crate::") {
        let before = rest[..p].chars().next_back();
        rest = &rest[p + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue; // `dsa_crate::`, `$crate::` (a macro's own path)
        }
        if let Some(group) = rest.trim_start().strip_prefix('{') {
            // crate::{a::b, c}: the first segment of every top-level item of the group.
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        out.insert(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let m = ident(rest);
            if !m.is_empty() {
                out.insert(m);
            }
        }
    }
    out
}

/// The top-level module a file belongs to (`src/engine/analytic.rs` → `engine`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.trim_end_matches(".rs").to_string()
}

/// The top-level modules in an order where each imports only earlier ones, or a cycle.
fn layers(graph: &BTreeMap<String, BTreeSet<String>>) -> Result<Vec<String>, Vec<String>> {
    let mut order = Vec::new();
    let mut placed = BTreeSet::new();
    while placed.len() < graph.len() {
        let ready: Vec<String> = graph
            .iter()
            .filter(|(m, deps)| {
                !placed.contains(*m) && deps.iter().all(|d| placed.contains(d) || !graph.contains_key(d))
            })
            .map(|(m, _)| m.clone())
            .collect();
        if ready.is_empty() {
            // Walk from any unplaced module along unplaced imports until a module repeats.
            let mut path: Vec<String> = vec![graph.keys().find(|m| !placed.contains(*m)).unwrap().clone()];
            loop {
                let last = path.last().unwrap();
                let next = graph[last].iter().find(|d| graph.contains_key(*d) && !placed.contains(*d)).unwrap().clone();
                if let Some(i) = path.iter().position(|m| *m == next) {
                    let mut cycle = path[i..].to_vec();
                    cycle.push(next);
                    return Err(cycle);
                }
                path.push(next);
            }
        }
        for m in ready {
            placed.insert(m.clone());
            order.push(m);
        }
    }
    Ok(order)
}

#[test]
fn the_library_modules_form_no_import_cycle_and_the_cli_is_a_leaf() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut cli_users = Vec::new();
    for f in common::paths(&src).into_iter().filter(|p| p.extension().is_some_and(|x| x == "rs")) {
        let m = module_of(&src, &f);
        if m == "main" || m == "lib" {
            continue; // the crate roots declare and re-export modules
        }
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        let deps = imports(&code);
        if m != "cli" && deps.contains("cli") {
            cli_users.push(f.strip_prefix(&src).unwrap().display().to_string());
        }
        let entry = graph.entry(m.clone()).or_default();
        entry.extend(deps.into_iter().filter(|d| *d != m));
    }
    let order = layers(&graph);
    println!("crate::X imports per top-level module of src/ (lowest layer first):");
    for m in order.as_ref().unwrap_or(&graph.keys().cloned().collect()) {
        let deps: Vec<&str> = graph[m].iter().map(String::as_str).collect();
        println!("  {m:<12} -> {}", if deps.is_empty() { "(nothing)".to_string() } else { deps.join(", ") });
    }
    match &order {
        Ok(_) => println!("no import cycle"),
        Err(cycle) => println!("import cycle: {}", cycle.join(" -> ")),
    }
    println!(
        "library files importing from cli: {}",
        if cli_users.is_empty() { "none".to_string() } else { cli_users.join(", ") }
    );
    assert!(order.is_ok() && cli_users.is_empty(), "the layering is broken (see above)");
}

#[test]
fn the_parser_sees_code_only() {
    let code = code_only("use crate::a; // crate::b\n/* crate::c */ let s = \"crate::d\"; let r = r#\"crate::e\"#; let c = '\"'; crate::{f::g, h};");
    assert_eq!(imports(&code), ["a", "f", "h"].iter().map(|s| s.to_string()).collect());
}

/// What the command line (`src/cli/`, `src/main.rs`) may name in the library: `commands` (which
/// computes every command's result), `error` (exit codes), `progress` (the observer a command
/// reports to), and the types `commands` takes that are not its own. Everything else a command
/// needs it reaches through `commands` (its re-exports included), so that the Python package,
/// built on `commands` too, lacks nothing the command line has.
const CLI_MAY_NAME: &[&str] = &[
    "commands",
    "error",
    "progress",
    "scenario::Field",
    "scenario::Scenario",
    "engine::EngineChoice",
    "indexer::device::Device",
];

/// The full paths after `prefix` (`crate::`, `dsa_sim::`) in code: `crate::a::b::C` → `a::b::C`,
/// `crate::a::{b, c::{d, self}}` → `a::b`, `a::c::d`, `a::c`.
fn paths(code: &str, prefix: &str) -> Vec<String> {
    fn ident(s: &str) -> &str {
        let n = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
        &s[..n]
    }
    /// One path at `s` under `base`, appended to `out`; returns the rest of `s`.
    fn tree<'a>(s: &'a str, base: &str, out: &mut Vec<String>) -> &'a str {
        let mut path = base.to_string();
        let mut s = s.trim_start();
        loop {
            if let Some(group) = s.strip_prefix('{') {
                let mut rest = group;
                loop {
                    rest = rest.trim_start();
                    if let Some(r) = rest.strip_prefix('}') {
                        return r;
                    }
                    rest = tree(rest, &path, out);
                    rest = rest.trim_start();
                    // `X as Y`: the alias is no path.
                    if let Some(r) = rest.strip_prefix("as ") {
                        let r = r.trim_start();
                        rest = &r[ident(r).len()..];
                    }
                    rest = rest.trim_start().strip_prefix(',').unwrap_or(rest);
                    if rest.is_empty() {
                        return rest;
                    }
                }
            }
            let id = ident(s);
            if id.is_empty() {
                out.push(path);
                return s;
            }
            if id != "self" {
                path = if path.is_empty() { id.to_string() } else { format!("{path}::{id}") };
            }
            s = &s[id.len()..];
            match s.trim_start().strip_prefix("::") {
                Some(r) => s = r.trim_start(),
                None => {
                    out.push(path);
                    return s;
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(p) = rest.find(prefix) {
        let before = rest[..p].chars().next_back();
        rest = &rest[p + prefix.len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        tree(rest, "", &mut out);
    }
    out
}

/// Whether the command line may name `path`: an allowed module or type, or below one; in
/// `src/main.rs` (`module_alias`) also a module on the way to one (`use dsa_sim::scenario`, so
/// that `crate::scenario::Field` resolves in the binary).
fn cli_may_name(path: &str, module_alias: bool) -> bool {
    CLI_MAY_NAME.iter().any(|a| {
        path == *a || path.starts_with(&format!("{a}::")) || (module_alias && a.starts_with(&format!("{path}::")))
    })
}

#[test]
fn the_cli_names_only_commands_error_progress_and_the_types_commands_takes() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: Vec<_> = common::paths(&src.join("cli"));
    files.push(src.join("main.rs"));
    let mut wrong = Vec::new();
    for f in files.into_iter().filter(|p| p.extension().is_some_and(|x| x == "rs")) {
        let code = code_only(&std::fs::read_to_string(&f).unwrap());
        let main = f.ends_with("main.rs");
        for prefix in ["crate::", "dsa_sim::"] {
            for p in paths(&code, prefix) {
                if !cli_may_name(&p, main) {
                    wrong.push(format!("{}: {prefix}{p}", f.strip_prefix(&src).unwrap().display()));
                }
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "the command line names library items beyond {CLI_MAY_NAME:?} (route them through `commands`):\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn the_path_parser_expands_use_trees() {
    let code = code_only("use crate::a::{b, c::{d, self}, E as F}; let x = crate::g::H::new(); dsa_crate::z;");
    assert_eq!(paths(&code, "crate::"), ["a::b", "a::c::d", "a::c", "a::E", "g::H::new"]);
    assert!(cli_may_name("scenario::Field::ALL", false) && !cli_may_name("scenario::PRESETS", false));
    assert!(!cli_may_name("scenario", false) && cli_may_name("scenario", true) && cli_may_name("indexer", true));
}

/// Folders whose files still import one another in a cycle: `diagnosis` (rule ↔ error_rates,
/// rule ↔ signature), whose decision rule the verdict work is reshaping (issue 41, item 4). A
/// folder leaves the list when its cycle is broken (the test says so).
const KNOWN_FOLDER_CYCLES: &[&str] = &[];

/// `code` without its `#[cfg(test)] mod NAME { … }` blocks (a test module's `super` is its file).
fn without_test_modules(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(p) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..p]);
        let after = &rest[p + "#[cfg(test)]".len()..];
        let t = after.trim_start();
        let is_mod = t.strip_prefix("mod ").or_else(|| t.strip_prefix("pub(crate) mod ")).is_some();
        match (is_mod, after.find('{')) {
            (true, Some(open)) => {
                let mut depth = 0;
                let mut end = after.len();
                for (i, c) in after[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    out
}

/// Per folder of `src/` below the top level: its files (and subfolders) as nodes, an edge where a
/// file names a sibling (`super::B`, `crate::FOLDER::B`); `mod.rs`, which declares the siblings,
/// is left out.
fn folder_graphs(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for f in common::paths(src).into_iter().filter(|p| p.extension().is_some_and(|x| x == "rs")) {
        let rel = f.strip_prefix(src).unwrap();
        let Some(folder) = rel.parent().filter(|p| !p.as_os_str().is_empty()) else { continue };
        let stem = rel.file_stem().unwrap().to_string_lossy().into_owned();
        if stem == "mod" {
            continue;
        }
        let folder = folder.to_string_lossy().replace('\\', "/");
        let code = without_test_modules(&code_only(&std::fs::read_to_string(&f).unwrap()));
        let own = format!("crate::{}::", folder.replace('/', "::"));
        let deps: BTreeSet<String> = paths(&code, "super::")
            .into_iter()
            .chain(paths(&code, &own))
            .filter_map(|p| p.split("::").next().map(str::to_string))
            .filter(|d| !d.is_empty() && *d != stem)
            .collect();
        out.entry(folder).or_default().entry(stem).or_default().extend(deps);
    }
    out
}

#[test]
fn no_folder_has_an_import_cycle_between_its_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut cycles = BTreeMap::new();
    for (folder, graph) in folder_graphs(&src) {
        if let Err(cycle) = layers(&graph) {
            cycles.insert(folder, cycle.join(" -> "));
        }
    }
    for (folder, cycle) in &cycles {
        println!("src/{folder}: {cycle}");
    }
    let unexpected: Vec<_> = cycles.keys().filter(|f| !KNOWN_FOLDER_CYCLES.contains(&f.as_str())).collect();
    assert!(unexpected.is_empty(), "import cycles between the files of {unexpected:?} (see above)");
    let fixed: Vec<_> = KNOWN_FOLDER_CYCLES.iter().filter(|f| !cycles.contains_key(**f)).collect();
    assert!(fixed.is_empty(), "{fixed:?} no longer has a cycle: remove it from KNOWN_FOLDER_CYCLES");
}

#[test]
fn test_modules_are_left_out() {
    let code =
        "use super::a;\n#[cfg(test)]\nmod tests {\n    use super::*;\n    fn f() { crate::x::b(); }\n}\nfn g() {}";
    assert_eq!(without_test_modules(code), "use super::a;\n\nfn g() {}");
}
