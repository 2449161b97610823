//! `presets`: every preset with every field's value, as a table, with its sources, or as JSON.

use super::{scenario_json, CommandError};
use crate::scenario::{find_preset, preset_values, Field, Scenario, Value, PRESET_NAMES, SOURCES};

/// Width the block layout fits in (a 100-column terminal).
const WIDTH: usize = 100;

/// A field's value as `presets` shows it: the canonical text, less a number format's internal
/// `:floor=F` (the amax floor of its scale; `--json` keeps the whole spec).
pub(crate) fn shown(s: &Scenario, f: Field) -> String {
    let text = s.text(f);
    match (s.get(f), text.split_once(":floor=")) {
        (Value::Format(_), Some((spec, _))) => spec.to_string(),
        _ => text,
    }
}

/// The preset names, in table order.
pub fn names() -> &'static [&'static str] {
    PRESET_NAMES
}

fn all() -> Result<Vec<(&'static str, Scenario)>, CommandError> {
    Ok(PRESET_NAMES.iter().map(|n| Scenario::preset(n).map(|s| (*n, s))).collect::<Result<_, _>>()?)
}

/// The `presets --json` object: presets, sources, references, defaults.
pub fn presets_json() -> Result<serde_json::Value, CommandError> {
    let presets = all()?;
    let map: serde_json::Map<String, serde_json::Value> =
        presets.iter().map(|(n, s)| (n.to_string(), scenario_json(s))).collect();
    let mut sources = serde_json::Map::new();
    for (n, s) in &presets {
        let p = find_preset(n)?;
        let values: Vec<serde_json::Value> = preset_values(n)?
            .iter()
            .map(
                |r| serde_json::json!({"field": r.field.name(), "value": s.get(r.field).to_json(), "source": r.source}),
            )
            .collect();
        sources.insert(n.to_string(), serde_json::json!({"summary": p.summary, "parent": p.parent, "values": values}));
    }
    let references: serde_json::Map<String, serde_json::Value> =
        SOURCES.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
    Ok(serde_json::json!({
        "presets": map,
        "sources": sources,
        "references": references,
        "defaults": scenario_json(&Scenario::default()),
    }))
}

/// The table `presets` prints: one block per preset, or with `wide` one table.
pub fn presets_text(wide_table: bool) -> Result<String, CommandError> {
    let presets = all()?;
    let defaults = Scenario::default();
    let mut cols: Vec<(String, Scenario)> = vec![("(defaults)".to_string(), defaults.clone())];
    cols.extend(presets.into_iter().map(|(n, s)| (n.to_string(), s)));
    let mut out = if wide_table { wide(&cols) } else { blocks(&cols, &defaults) };
    out.push_str(
        "\nNumber formats are shown without their internal amax floor (floor=F); --json gives every value\n\
in full, --wide one table. Use with --preset NAME on recall, rank, sweep, calibrate, verdict and\n\
formats; field flags override single fields.\n",
    );
    Ok(out)
}

/// Every preset's values (its parents' included) with their sources, then the repositories.
/// `presets --sources`: each preset's own values with the reference code they come from.
pub fn sources_text() -> Result<String, CommandError> {
    let mut out = String::new();
    for name in PRESET_NAMES {
        let p = find_preset(name)?;
        let s = Scenario::preset(name)?;
        out.push_str(&format!(
            "{name}: {}
",
            p.summary
        ));
        for r in preset_values(name)? {
            out.push_str(&format!(
                "  {} = {}
      {}
",
                r.field.name(),
                shown(&s, r.field),
                r.source
            ));
        }
        out.push('\n');
    }
    out.push_str("Repositories (as read in December 2026):\n");
    for (k, v) in SOURCES {
        out.push_str(&format!("  {k}: {v}\n"));
    }
    Ok(out)
}

/// One column per preset, one row per field.
fn wide(cols: &[(String, Scenario)]) -> String {
    let fw = Field::ALL.iter().map(|f| f.name().len()).max().unwrap_or(8);
    let widths: Vec<usize> = cols
        .iter()
        .map(|(n, s)| Field::ALL.iter().map(|f| shown(s, *f).len()).chain([n.len()]).max().unwrap_or(4))
        .collect();
    let mut out = String::new();
    out.push_str(&format!("{:fw$}", "field"));
    for ((n, _), w) in cols.iter().zip(&widths) {
        out.push_str(&format!("  {n:>w$}"));
    }
    out.push('\n');
    for &f in Field::ALL {
        out.push_str(&format!("{:fw$}", f.name()));
        for ((_, s), w) in cols.iter().zip(&widths) {
            out.push_str(&format!("  {:>w$}", shown(s, f)));
        }
        out.push('\n');
    }
    out
}

/// One block per preset: its every field as `name value` cells, column by column, as many
/// columns as fit in [`WIDTH`]; `*` marks a value that differs from the defaults.
fn blocks(cols: &[(String, Scenario)], defaults: &Scenario) -> String {
    let fw = Field::ALL.iter().map(|f| f.name().len()).max().unwrap_or(8);
    let vw = cols.iter().flat_map(|(_, s)| Field::ALL.iter().map(|f| shown(s, *f).len())).max().unwrap_or(8);
    // A cell: 2 spaces of indent or gap, the name, a space, the value, the mark.
    let cell = fw + 1 + vw + 1;
    let ncols = ((WIDTH - 2) / (cell + 2)).max(1);
    let nrows = Field::ALL.len().div_ceil(ncols);
    let mut out = String::new();
    for (i, (name, s)) in cols.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let changed = Field::ALL.iter().filter(|f| s.get(**f) != defaults.get(**f)).count();
        if i == 0 {
            out.push_str(&format!("{name}\n"));
        } else {
            out.push_str(&format!("{name}  ({changed} fields differ from the defaults: *)\n"));
        }
        for r in 0..nrows {
            let mut line = String::new();
            for c in 0..ncols {
                let Some(&f) = Field::ALL.get(c * nrows + r) else { break };
                let mark = if i > 0 && s.get(f) != defaults.get(f) { "*" } else { "" };
                let value = format!("{}{mark}", shown(s, f));
                line.push_str(&format!("  {:fw$} {value:<w$}", f.name(), w = vw + 1));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}
