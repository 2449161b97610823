//! `dsa-sim presets`: every preset with every field's value.

use super::{emit, print_json, scenario_json, CliError};
use crate::scenario::{Field, Scenario, PRESET_NAMES};

/// Arguments of `dsa-sim presets`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Use a preset with --preset NAME on recall, rank, sweep, calibrate, verdict and formats, or with \
preset = \"NAME\" in a --scenario file; field flags override its fields.")]
pub struct PresetsArgs {
    /// Print one JSON object: {"presets": {NAME: {field: value, …}}, "defaults": {…}}.
    #[arg(long)]
    pub json: bool,
}

/// Runs `dsa-sim presets`.
pub fn run(args: &PresetsArgs) -> Result<(), CliError> {
    let presets: Vec<(&str, Scenario)> =
        PRESET_NAMES.iter().map(|n| Scenario::preset(n).map(|s| (*n, s))).collect::<Result<_, _>>()?;
    if args.json {
        let map: serde_json::Map<String, serde_json::Value> =
            presets.iter().map(|(n, s)| (n.to_string(), scenario_json(s))).collect();
        return print_json(&serde_json::json!({"presets": map, "defaults": scenario_json(&Scenario::default())}));
    }
    let mut cols: Vec<(String, Scenario)> = vec![("(defaults)".to_string(), Scenario::default())];
    cols.extend(presets.into_iter().map(|(n, s)| (n.to_string(), s)));
    let fw = Field::ALL.iter().map(|f| f.name().len()).max().unwrap_or(8);
    let widths: Vec<usize> = cols
        .iter()
        .map(|(n, s)| Field::ALL.iter().map(|f| s.text(*f).len()).chain([n.len()]).max().unwrap_or(4))
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
            out.push_str(&format!("  {:>w$}", s.text(f)));
        }
        out.push('\n');
    }
    out.push_str(
        "\nUse with --preset NAME on recall, rank, sweep, calibrate, verdict and formats; field flags override single fields.\n",
    );
    emit(&out)
}
