//! `dsa-sim completions SHELL` and `dsa-sim man`: shell integration generated from the clap
//! definition of the whole command line, so they list exactly the flags `--help` does.

use super::{emit, Cli, CliError};
use clap::CommandFactory;

/// The shells `dsa-sim completions` writes a script for.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shell {
    /// bash (source it, or put it in /etc/bash_completion.d/ or ~/.local/share/bash-completion/completions/dsa-sim).
    Bash,
    /// zsh (save as _dsa-sim in a folder of $fpath).
    Zsh,
    /// fish (save as ~/.config/fish/completions/dsa-sim.fish).
    Fish,
    /// PowerShell (dot-source it from $PROFILE).
    Powershell,
}

/// Arguments of `dsa-sim completions`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
dsa-sim completions bash > ~/.local/share/bash-completion/completions/dsa-sim\n  \
dsa-sim completions zsh > \"${fpath[1]}/_dsa-sim\"\n  \
dsa-sim completions fish > ~/.config/fish/completions/dsa-sim.fish\n  \
dsa-sim completions powershell >> $PROFILE")]
pub struct CompletionsArgs {
    /// The shell to write a completion script for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: Shell,
}

/// Arguments of `dsa-sim man`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example:\n  dsa-sim man > ~/.local/share/man/man1/dsa-sim.1 && man dsa-sim")]
pub struct ManArgs {}

/// Runs `dsa-sim completions SHELL`: the script on stdout.
pub fn completions(args: &CompletionsArgs) -> Result<(), CliError> {
    use clap_complete::shells;
    let mut cmd = Cli::command();
    let mut buf: Vec<u8> = Vec::new();
    match args.shell {
        Shell::Bash => clap_complete::generate(shells::Bash, &mut cmd, "dsa-sim", &mut buf),
        Shell::Zsh => clap_complete::generate(shells::Zsh, &mut cmd, "dsa-sim", &mut buf),
        Shell::Fish => clap_complete::generate(shells::Fish, &mut cmd, "dsa-sim", &mut buf),
        Shell::Powershell => clap_complete::generate(shells::PowerShell, &mut cmd, "dsa-sim", &mut buf),
    }
    emit(&String::from_utf8_lossy(&buf))
}

/// Runs `dsa-sim man`: the roff page dsa-sim(1) on stdout, with one section per command.
pub fn man(_args: &ManArgs) -> Result<(), CliError> {
    let cmd = Cli::command();
    let mut buf: Vec<u8> = Vec::new();
    let write = |e: std::io::Error| CliError::failure(format!("cannot render the man page: {e}"));
    let page = clap_mangen::Man::new(cmd.clone());
    page.render_title(&mut buf).map_err(write)?;
    page.render_name_section(&mut buf).map_err(write)?;
    page.render_synopsis_section(&mut buf).map_err(write)?;
    page.render_description_section(&mut buf).map_err(write)?;
    page.render_options_section(&mut buf).map_err(write)?;
    page.render_subcommands_section(&mut buf).map_err(write)?;
    // Every command's own options, as `dsa-sim COMMAND --help` lists them; a command with
    // subcommands of its own (`import topk`, `import niah`) gets one section per subcommand.
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let inner: Vec<&clap::Command> = sub.get_subcommands().filter(|s| s.get_name() != "help").collect();
        if inner.is_empty() {
            render_command(&mut buf, sub.get_name(), sub);
        } else {
            for s in inner {
                render_command(&mut buf, &format!("{} {}", sub.get_name(), s.get_name()), s);
            }
        }
    }
    page.render_version_section(&mut buf).map_err(write)?;
    emit(&ascii_roff(&String::from_utf8_lossy(&buf)))
}

/// One command's man page section: its summary, usage and every visible flag.
fn render_command(buf: &mut Vec<u8>, name: &str, sub: &clap::Command) {
    let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
    let sub = sub.clone().name(format!("dsa-sim {name}"));
    buf.extend_from_slice(format!(".SH \"DSA\\-SIM {}\"\n", name.to_uppercase()).as_bytes());
    buf.extend_from_slice(roff_text(&about).as_bytes());
    let usage = sub.clone().render_usage().to_string();
    buf.extend_from_slice(format!(".PP\n{}\n", roff_escape(usage.trim_start_matches("Usage: "))).as_bytes());
    for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
        let mut head = String::new();
        if let Some(s) = arg.get_short() {
            head.push_str(&format!("-{s}"));
        }
        if let Some(l) = arg.get_long() {
            if !head.is_empty() {
                head.push_str(", ");
            }
            head.push_str(&format!("--{l}"));
        }
        if arg.get_action().takes_values() {
            let v = arg
                .get_value_names()
                .and_then(|v| v.first())
                .map(|s| s.to_string())
                .unwrap_or_else(|| arg.get_id().to_string().to_uppercase());
            head = if head.is_empty() { v } else { format!("{head} {v}") };
        }
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        buf.extend_from_slice(format!(".TP\n\\fB{}\\fR\n{}", roff_escape(&head), roff_text(&help)).as_bytes());
    }
}

/// Replaces every non-ASCII character by groff's `\[uXXXX]` escape, so the page renders the
/// same without a preprocessor (`groff -man` as well as `man`).
fn ascii_roff(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\[u{:04X}]", c as u32));
        }
    }
    out
}

/// Escapes text for roff: backslashes and hyphens, and a leading `.` or `'`.
fn roff_escape(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// A paragraph of roff text, one input line per source line.
fn roff_text(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        out.push_str(&roff_escape(line));
        out.push('\n');
    }
    if out.is_empty() {
        out.push('\n');
    }
    out
}
