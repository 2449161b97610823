//! dsa-sim: thin entry point. Parse, run, print errors as one line, exit 2 for bad input.

use clap::error::ErrorKind;
use clap::Parser;
use dsa_sim::cli::Cli;
use std::process::ExitCode;

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
                    ExitCode::from(2)
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
                    eprintln!("error: {message} (see dsa-sim --help)");
                    ExitCode::from(2)
                }
            };
        }
    };
    match cli.command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.message.replace('\n', " "));
            ExitCode::from(e.code)
        }
    }
}
