//! The two kinds of error every library error belongs to. A command's exit status depends on
//! the kind alone (the command line maps it in one place): bad input, which the user fixes by
//! changing what they gave, or a failure to compute or to write a result.

use std::io;

/// What kind of failure an error reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Bad input: a value, a file's contents, a combination of options, an output path that
    /// cannot be used. Detected before any work starts wherever possible.
    Input,
    /// Valid input, but the work failed: a computation, or writing its result (a full disk, an
    /// I/O error, a figure that could not be drawn).
    Failure,
}

/// A library error that knows its [`ErrorKind`].
pub trait Classify: std::error::Error {
    /// Whether the error is bad input or a failure.
    fn kind(&self) -> ErrorKind;
    /// `kind() == ErrorKind::Input`.
    fn is_input(&self) -> bool {
        self.kind() == ErrorKind::Input
    }
}

/// A message as one printable line for stderr: line breaks become spaces and other control
/// characters (from echoed user input) their escapes, so an error is always exactly one line.
pub fn one_line(message: &str) -> String {
    // Long echoed values are cut too ([`crate::input::cap_line`]), so the line is a short one.
    crate::input::cap_line(&printable_line(message)).into_owned()
}

fn printable_line(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for c in message.trim().chars() {
        match c {
            '\n' | '\r' | '\u{2028}' | '\u{2029}' | '\u{85}' => out.push(' '),
            '\t' => out.push(' '),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// The kind of an I/O error on a path the user named: a path that does not exist, may not be
/// written, or is a folder where a file is expected (or the reverse) is bad input, and so is a
/// file whose content cannot be read as what it should be (`InvalidData`: not UTF-8, or past
/// the 64 MiB bound of [`crate::input::read_to_string`]; `UnexpectedEof`: truncated); anything
/// else (a full disk, a device error) is a failure.
pub(crate) fn io_kind(e: &io::Error) -> ErrorKind {
    use io::ErrorKind as K;
    match e.kind() {
        K::NotFound
        | K::PermissionDenied
        | K::AlreadyExists
        | K::IsADirectory
        | K::NotADirectory
        | K::ReadOnlyFilesystem
        | K::InvalidInput
        | K::InvalidFilename
        | K::InvalidData
        | K::UnexpectedEof => ErrorKind::Input,
        _ => ErrorKind::Failure,
    }
}
