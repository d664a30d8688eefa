//! Logging into the runner's log; each line is tagged with topic, job id and attempt.

use crate::bindings::hourglass::handler::log as wit;

pub use wit::Level;

/// Write one line to the runner's log.
pub fn log(level: Level, message: &str) {
    wit::log(level, message);
}

/// Log at info level, `format!`-style.
#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log($crate::Level::Info, &::std::format!($($arg)*)) };
}

/// Log at warn level, `format!`-style.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log($crate::Level::Warn, &::std::format!($($arg)*)) };
}

/// Log at error level, `format!`-style.
#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log($crate::Level::Error, &::std::format!($($arg)*)) };
}

/// Log at debug level, `format!`-style.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log($crate::Level::Debug, &::std::format!($($arg)*)) };
}
