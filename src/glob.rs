//! Redis's glob patterns (`*`, `?`, `[a-z]`, `[^a]`, `\x`) on binary data.
//!
//! The answers are those of Redis's `stringmatchlen`, quirks included, so a
//! pattern that a Redis user tried against Redis means the same here. The
//! search is different: Redis recurses once per `*`; this walks the pattern
//! with one remembered `*` and backtracks only to it. That is enough because
//! every other token consumes exactly one byte, and it keeps the worst case
//! at O(pattern × text) with no recursion, whatever the pattern.

/// Redis gives up (answers "no match") when a match would have to go
/// through more than this many `*` groups that are followed by something;
/// it is Redis's guard against abusive patterns, kept so answers agree.
const MAX_STARS: usize = 1000;

/// Whether `text` matches `pattern`, as Redis's `stringmatchlen`.
///
/// Bytes compare as unsigned values (0–255), so `[\x80-\xff]` is the upper
/// half; Redis does the same where C's `char` is unsigned (on x86, its
/// ranges compare bytes above 0x7f as negative). `nocase` folds ASCII only,
/// as C's `tolower` does in the C locale Redis runs in.
pub fn matches(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    // Redis's loop needs a byte of text to start, so empty text matches only
    // the empty pattern: not even `*` (KEYS and SCAN special-case `*`).
    if text.is_empty() {
        return pattern.is_empty();
    }
    walk(pattern, text, nocase)
}

/// The matching loop for non-empty text.
fn walk(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    let (mut p, mut t) = (0, 0);
    // The pattern position after the latest `*`, and the text position that
    // `*` currently stops at; a mismatch later lets the `*` take one more byte.
    let mut retry: Option<(usize, usize)> = None;
    let mut stars = 0;
    while t < text.len() {
        if pattern.get(p) == Some(&b'*') {
            p = skip_stars(pattern, p);
            if p == pattern.len() {
                return true;
            }
            stars += 1;
            if stars > MAX_STARS {
                return false;
            }
            retry = Some((p, t));
        } else if let Some(next) = step(pattern, p, text[t], nocase) {
            p = next;
            t += 1;
        } else if let Some((after_star, from)) = retry {
            retry = Some((after_star, from + 1));
            p = after_star;
            t = from + 1;
        } else {
            return false;
        }
    }
    skip_stars(pattern, p) == pattern.len()
}

fn skip_stars(pattern: &[u8], mut p: usize) -> usize {
    while pattern.get(p) == Some(&b'*') {
        p += 1;
    }
    p
}

/// Matches the one-byte token at `p` (anything but `*`) against `byte`:
/// the position after the token if it matches, `None` if it does not or
/// the pattern has ended. How far a token reaches depends only on the
/// pattern, never on the byte.
fn step(pattern: &[u8], p: usize, byte: u8, nocase: bool) -> Option<usize> {
    let (matched, next) = match pattern[p..] {
        [] => return None,
        [b'?', ..] => (true, p + 1),
        [b'[', ..] => class(pattern, p + 1, byte, nocase),
        // A lone `\` at the very end stands for itself.
        [b'\\', escaped, ..] => (same(escaped, byte, nocase), p + 2),
        [literal, ..] => (same(literal, byte, nocase), p + 1),
    };
    matched.then_some(next)
}

/// A bracket class whose body starts at `i`: whether `byte` is in it, and
/// the position after it.
fn class(pattern: &[u8], mut i: usize, byte: u8, nocase: bool) -> (bool, usize) {
    let negated = pattern.get(i) == Some(&b'^');
    if negated {
        i += 1;
    }
    let mut found = false;
    loop {
        match pattern[i..] {
            // Redis compares an escaped byte exactly, even with nocase.
            [b'\\', escaped, ..] => {
                found |= escaped == byte;
                i += 2;
            }
            [b']', ..] => return (found != negated, i + 1),
            // Unterminated: the class runs to the end of the pattern.
            [] => return (found != negated, i),
            // `]` may end a range (`[a-]` is the range `]`..`a`), as in Redis.
            [from, b'-', to, ..] => {
                found |= in_range(from, to, byte, nocase);
                i += 3;
            }
            [member, ..] => {
                found |= same(member, byte, nocase);
                i += 1;
            }
        }
    }
}

/// Redis orders the ends first and folds case after, so with nocase `[Z-a]`
/// becomes `z`..`a` and matches nothing.
fn in_range(from: u8, to: u8, byte: u8, nocase: bool) -> bool {
    let (low, high) = if from <= to { (from, to) } else { (to, from) };
    if nocase {
        (low.to_ascii_lowercase()..=high.to_ascii_lowercase()).contains(&byte.to_ascii_lowercase())
    } else {
        (low..=high).contains(&byte)
    }
}

fn same(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn m(pattern: &str, text: &str) -> bool {
        matches(pattern.as_bytes(), text.as_bytes(), false)
    }

    fn mi(pattern: &str, text: &str) -> bool {
        matches(pattern.as_bytes(), text.as_bytes(), true)
    }

    #[test]
    fn literals() {
        assert!(m("port", "port"));
        assert!(!m("port", "por"));
        assert!(!m("port", "ports"));
        assert!(!m("port", "PORT"));
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(!m("a", ""));
    }

    #[test]
    fn nocase_folds_ascii() {
        assert!(mi("PORT", "port"));
        assert!(mi("port", "PoRt"));
        assert!(!mi("port", "pore"));
    }

    #[test]
    fn star() {
        assert!(m("*", "anything"));
        assert!(m("a*", "a"));
        assert!(m("a*", "abc"));
        assert!(m("*c", "abc"));
        assert!(m("a*c", "abbbc"));
        assert!(m("a*c", "ac"));
        assert!(!m("a*c", "abcd"));
        assert!(m("*ttl*", "lease-ttl"));
        assert!(m("*b*d*", "abcde"));
        assert!(!m("*b*d*", "abce"));
        assert!(m("a*b*c", "aXbYbZc"));
    }

    #[test]
    fn runs_of_stars_collapse() {
        assert!(m("a***c", "abc"));
        assert!(m("***", "x"));
        assert!(m("abc***", "abc"));
        assert!(m("a*b**", "ab"));
    }

    #[test]
    fn star_does_not_match_empty_text_as_in_redis() {
        assert!(!m("*", ""));
        assert!(!m("**", ""));
        assert!(!m("?", ""));
    }

    #[test]
    fn question_mark() {
        assert!(m("a?c", "abc"));
        assert!(!m("a?c", "ac"));
        assert!(!m("???", "ab"));
        assert!(m("???", "abc"));
        assert!(m("?*", "a"));
    }

    #[test]
    fn class_members() {
        assert!(m("[abc]", "b"));
        assert!(!m("[abc]", "d"));
        assert!(m("x[abc]y", "xcy"));
        assert!(!m("[abc]", "ab"));
        assert!(!mi("[abc]", "D"));
        assert!(mi("[abc]", "B"));
        assert!(mi("[ABC]", "b"));
    }

    #[test]
    fn negated_class() {
        assert!(!m("[^abc]", "a"));
        assert!(m("[^abc]", "d"));
        assert!(!mi("[^abc]", "A"));
        assert!(m("[^abc]", "A"));
        assert!(!m("[^a]", ""));
    }

    #[test]
    fn ranges() {
        assert!(m("[a-c]", "b"));
        assert!(m("[a-c]", "a"));
        assert!(m("[a-c]", "c"));
        assert!(!m("[a-c]", "d"));
        assert!(m("[0-9a-f]", "e"));
        assert!(!m("[^0-9]", "5"));
        assert!(m("[^0-9]", "x"));
    }

    #[test]
    fn reversed_ranges_work_as_in_redis() {
        assert!(m("[z-a]", "m"));
        assert!(m("[c-a]", "a"));
        assert!(!m("[c-a]", "d"));
    }

    #[test]
    fn ranges_with_nocase_fold_after_ordering() {
        assert!(mi("[A-C]", "b"));
        assert!(mi("[a-c]", "B"));
        assert!(!m("[A-C]", "b"));
        // 'Z' < 'a', so the ends stay in that order and fold to 'z'..'a'.
        assert!(!mi("[Z-a]", "z"));
        assert!(m("[Z-a]", "_"));
    }

    #[test]
    fn dash_at_the_edges() {
        assert!(m("[-a]", "-"));
        // Too short to be a range: the members are 'a' and '-'.
        assert!(m("[a-", "-"));
        assert!(!m("[a-", "b"));
        // `[a-]` is the range ']'..'a', and the class is then unterminated.
        assert!(m("[a-]", "_"));
        assert!(m("[a-]", "]"));
        assert!(!m("[a-]", "-"));
    }

    #[test]
    fn empty_class_matches_nothing() {
        assert!(!m("[]", "]"));
        assert!(!m("[]", "a"));
        // `[]` then a literal `]`: still nothing can match the empty class.
        assert!(!m("[]]", "]"));
        assert!(m("[^]", "a"));
    }

    #[test]
    fn unterminated_class_runs_to_the_end() {
        assert!(m("[abc", "b"));
        assert!(!m("[abc", "d"));
        assert!(!m("x[", "x"));
        assert!(!m("[", "["));
        assert!(m("[^", "q"));
        assert!(m("a[^", "ab"));
    }

    #[test]
    fn escapes_outside_classes() {
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert!(m("\\?", "?"));
        assert!(!m("\\?", "x"));
        assert!(m("\\[a]", "[a]"));
        assert!(m("a\\\\b", "a\\b"));
        assert!(mi("\\P", "p"));
        // A trailing backslash is a literal backslash.
        assert!(m("a\\", "a\\"));
        assert!(!m("a\\", "a"));
    }

    #[test]
    fn escapes_inside_classes() {
        assert!(m("[\\]]", "]"));
        assert!(m("[\\-a]", "-"));
        assert!(m("[a\\-z]", "-"));
        assert!(!m("[a\\-z]", "b"));
        assert!(m("[\\^a]", "^"));
        // Redis compares escaped class members exactly, even with nocase.
        assert!(!mi("[\\A]", "a"));
        assert!(mi("[\\A]", "A"));
    }

    #[test]
    fn binary_bytes() {
        assert!(matches(b"\x00*\xff", b"\x00abc\xff", false));
        assert!(!matches(b"\x00*\xff", b"\x00abc\xfe", false));
        assert!(matches(b"[\x80-\xff]", b"\x90", false));
        assert!(!matches(b"[\x80-\xff]", b"\x7f", false));
        assert!(matches(b"?", b"\x00", false));
        assert!(matches(b"a\x00?", b"a\x00\xc3", true));
        // nocase leaves non-ASCII bytes alone (Latin-1 'Ä' vs 'ä').
        assert!(!matches(b"\xc4", b"\xe4", true));
    }

    #[test]
    fn many_stars_against_long_text_stay_fast() {
        let pattern = "a*".repeat(40) + "b";
        let text = "a".repeat(100_000);
        assert!(!m(&pattern, &text));
        assert!(m(&pattern, &(text.clone() + "b")));
        let pattern = "*a".repeat(40) + "*b*";
        assert!(!m(&pattern, &text));
    }

    #[test]
    fn more_than_a_thousand_stars_never_match_as_in_redis() {
        let text = "a".repeat(2000);
        assert!(m(&"*a".repeat(1000), &text));
        assert!(!m(&"*a".repeat(1001), &text));
        // A trailing star group is not followed by anything: it never counts.
        assert!(m(&"a*".repeat(1001), &text));
    }

    /// A direct, exponential search: each `*` takes zero bytes or one more.
    fn naive(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
        match (pattern.first(), text.split_first()) {
            (None, _) => text.is_empty(),
            (Some(b'*'), _) => {
                naive(&pattern[1..], text, nocase)
                    || (!text.is_empty() && naive(pattern, &text[1..], nocase))
            }
            (Some(_), None) => false,
            (Some(_), Some((&byte, rest))) => step(pattern, 0, byte, nocase)
                .is_some_and(|next| naive(&pattern[next..], rest, nocase)),
        }
    }

    fn bytes_from(alphabet: &'static [u8], max: usize) -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::sample::select(alphabet), 0..max)
    }

    proptest! {
        #[test]
        fn agrees_with_an_exhaustive_search(
            pattern in bytes_from(b"ab*?[]^-\\A", 10),
            text in bytes_from(b"abA-]^\\*", 8),
            nocase: bool,
        ) {
            let expected = if text.is_empty() {
                pattern.is_empty()
            } else {
                naive(&pattern, &text, nocase)
            };
            prop_assert_eq!(matches(&pattern, &text, nocase), expected);
        }
    }
}
