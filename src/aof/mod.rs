//! The append-only log. (Being written.)

pub mod format;
