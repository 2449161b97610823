//! Every scenario command's `--help` names exactly the presets of the preset table (issue 20:
//! it listed presets that had been removed).

use dsa_sim::scenario::PRESETS;
use std::process::Command;

/// The text of the `--preset` option in `dsa-sim CMD --help`: its line and the wrapped lines
/// after it, up to the next option or heading, with whitespace collapsed.
fn preset_help(cmd: &str) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args([cmd, "--help"]).env("COLUMNS", "100").output().unwrap();
    assert!(o.status.success(), "{cmd} --help: {}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let mut lines = out.lines().skip_while(|l| !l.trim_start().starts_with("--preset")).peekable();
    let mut text = String::new();
    if let Some(first) = lines.next() {
        text.push_str(first);
    }
    for l in lines {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('-') || !l.starts_with(' ') {
            break;
        }
        text.push(' ');
        text.push_str(t);
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_scenario_command_lists_exactly_the_presets() {
    let want: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
    for cmd in ["recall", "rank", "sweep", "calibrate", "verdict", "plan", "formats"] {
        let text = preset_help(cmd);
        let list = text
            .split_once("named preset: ")
            .and_then(|(_, rest)| rest.split_once(" (").map(|(names, _)| names))
            .unwrap_or_else(|| panic!("{cmd}: no preset list in `{text}`"));
        let got: Vec<&str> = list.split(", ").collect();
        assert_eq!(got, want, "{cmd} --help: {text}");
    }
}
