//! Redis's glob patterns (`*`, `?`, `[a-z]`, `[^a]`, `\x`) on binary data.
//! (Interface stub: implemented in its own change.)

/// Whether `text` matches `pattern`, as Redis's `stringmatchlen`.
pub fn matches(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    let _ = (pattern, text, nocase);
    todo!()
}
