//! Wall-clock time in milliseconds since the Unix epoch: the unit of every
//! score in Redis. Only the edges of the program read the clock; everything
//! below takes `now_ms` as an argument. (Defined once, in `hourglass_client`.)

pub use hourglass_client::clock::{millis, now_ms};
