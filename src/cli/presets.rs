//! `dsa-sim presets`: every preset with every field's value.

use super::{emit, print_json, CliError};
use crate::commands::presets::{presets_json, presets_text, sources_text};

/// Arguments of `dsa-sim presets`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Use a preset with --preset NAME on recall, rank, sweep, calibrate, verdict and formats, or with \
preset = \"NAME\" in a --scenario file; field flags override its fields."
)]
pub struct PresetsArgs {
    /// One wide table (a column per preset, a row per field) instead of one block per preset.
    #[arg(long, conflicts_with_all = ["json", "sources"])]
    pub wide: bool,
    /// Each preset's own values with the file and line of the reference code they come from.
    #[arg(long, conflicts_with = "json")]
    pub sources: bool,
    /// Print one JSON object: {"presets": {NAME: {field: value, …}}, "sources": {NAME: {"summary",
    /// "parent", "values": [{field, value, source}]}}, "references": {…}, "defaults": {…}}.
    #[arg(long)]
    pub json: bool,
}

/// Runs `dsa-sim presets`.
pub fn run(args: &PresetsArgs) -> Result<(), CliError> {
    if args.json {
        return print_json(&presets_json()?);
    }
    if args.sources {
        return emit(&sources_text()?);
    }
    emit(&presets_text(args.wide)?)
}
