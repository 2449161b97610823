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
                    let text = e.render().to_string();
                    let first = text.lines().next().unwrap_or("invalid arguments");
                    let first = first.strip_prefix("error: ").unwrap_or(first);
                    eprintln!("error: {first} (see dsa-sim --help)");
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
