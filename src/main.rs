//! dsa-sim: thin entry point. Parse, run, print errors as one line, exit 2 for bad input.

mod cli;

use clap::error::ErrorKind;
use clap::Parser;
use cli::{exit_code, Cli};
use dsa_sim::error::one_line;
use std::process::ExitCode;

// The library's modules under their own names: the command line, a module tree of this binary
// that the library never sees, reaches them as `crate::engine`, `crate::scenario`, …
use dsa_sim::{commands, engine, error, indexer, progress, scenario};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    ExitCode::SUCCESS
                }
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = e.print();
                    ExitCode::from(exit_code(dsa_sim::error::ErrorKind::Input))
                }
                ErrorKind::InvalidUtf8 => {
                    eprintln!("error: {} (see dsa-sim --help)", invalid_utf8_argument());
                    ExitCode::from(exit_code(dsa_sim::error::ErrorKind::Input))
                }
                _ => {
                    // clap's message can span lines (e.g. the names of missing arguments): keep
                    // everything before the usage block, on one line.
                    let text = e.render().to_string();
                    let parts: Vec<&str> = text
                        .lines()
                        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .collect();
                    let message = parts.join(" ");
                    let message = message.strip_prefix("error: ").unwrap_or(&message);
                    eprintln!("error: {} (see dsa-sim --help)", one_line(message));
                    ExitCode::from(exit_code(dsa_sim::error::ErrorKind::Input))
                }
            };
        }
    };
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(&e.message));
            ExitCode::from(exit_code(e.kind))
        }
    }
}

/// Names the first command-line argument that is not valid UTF-8 (and the flag before it).
fn invalid_utf8_argument() -> String {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match args.iter().enumerate().skip(1).find(|(_, a)| a.to_str().is_none()) {
        Some((i, a)) => {
            let shown = one_line(&a.to_string_lossy());
            match args.get(i - 1).and_then(|p| p.to_str()).filter(|p| p.starts_with('-')) {
                Some(flag) => format!("{flag} {shown:?}: the value is not valid UTF-8"),
                None => format!("argument {i} ({shown:?}) is not valid UTF-8"),
            }
        }
        None => "an argument is not valid UTF-8".to_string(),
    }
}
