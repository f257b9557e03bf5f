//! Redis's `sdssplitargs`: a line split into arguments with quotes and
//! escapes. Inline requests (typed over telnet) and the configuration file
//! both use it, so quoting means the same in both, and the same as in Redis.

/// Splits a line into arguments as Redis's `sdssplitargs` does, so quoting
/// means the same as in redis.conf: `"..."` with `\n \r \t \b \a \xHH`
/// escapes, `'...'` with only `\'`, and a closing quote must end the
/// argument. `None` for unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    // Redis reads the line as a C string: a NUL byte ends it.
    let mut rest = line.split(|&b| b == 0).next().unwrap_or_default();
    let mut args = Vec::new();
    loop {
        while let [first, tail @ ..] = rest {
            if !is_c_space(*first) {
                break;
            }
            rest = tail;
        }
        if rest.is_empty() {
            return Some(args);
        }
        let (arg, after) = next_arg(rest)?;
        args.push(arg);
        rest = after;
    }
}

/// C's `isspace`, which includes vertical tab and form feed.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// One argument from the start of `text`; quotes may begin mid-argument
/// (`a"b c"` is `ab c`), as in Redis.
fn next_arg(mut text: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut arg = Vec::new();
    loop {
        match text {
            [] | [b' ' | b'\t' | b'\n' | b'\r', ..] => return Some((arg, text)),
            // A closing quote ends the argument (what follows must be blank).
            [b'"', rest @ ..] => {
                let rest = double_quoted(rest, &mut arg)?;
                return Some((arg, rest));
            }
            [b'\'', rest @ ..] => {
                let rest = single_quoted(rest, &mut arg)?;
                return Some((arg, rest));
            }
            [b, rest @ ..] => {
                arg.push(*b);
                text = rest;
            }
        }
    }
}

fn double_quoted<'a>(mut text: &'a [u8], arg: &mut Vec<u8>) -> Option<&'a [u8]> {
    loop {
        match text {
            [b'\\', b'x', high, low, rest @ ..]
                if high.is_ascii_hexdigit() && low.is_ascii_hexdigit() =>
            {
                arg.push(hex_value(*high) << 4 | hex_value(*low));
                text = rest;
            }
            [b'\\', escaped, rest @ ..] => {
                arg.push(unescape(*escaped));
                text = rest;
            }
            [b'"', rest @ ..] => return after_closing_quote(rest),
            [b, rest @ ..] => {
                arg.push(*b);
                text = rest;
            }
            [] => return None,
        }
    }
}

fn single_quoted<'a>(mut text: &'a [u8], arg: &mut Vec<u8>) -> Option<&'a [u8]> {
    loop {
        match text {
            [b'\\', b'\'', rest @ ..] => {
                arg.push(b'\'');
                text = rest;
            }
            [b'\'', rest @ ..] => return after_closing_quote(rest),
            [b, rest @ ..] => {
                arg.push(*b);
                text = rest;
            }
            [] => return None,
        }
    }
}

/// Redis refuses `"a"b`: a closing quote must be followed by a space or
/// the end of the line.
fn after_closing_quote(rest: &[u8]) -> Option<&[u8]> {
    match rest.first() {
        Some(&b) if !is_c_space(b) => None,
        _ => Some(rest),
    }
}

fn unescape(b: u8) -> u8 {
    match b {
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'b' => 0x08,
        b'a' => 0x07,
        other => other,
    }
}

fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_sdssplitargs() {
        let split = |line: &[u8]| split_args(line);
        assert_eq!(
            split(b"  a  b\t c "),
            Some(vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()])
        );
        assert_eq!(split(b"\"\""), Some(vec![Vec::new()]));
        assert_eq!(
            split(b"\"\\n\\r\\t\\b\\a\\q\\\"\""),
            Some(vec![b"\n\r\t\x08\x07q\"".to_vec()])
        );
        assert_eq!(split(b"\"\\xff\\x4\""), Some(vec![b"\xffx4".to_vec()]));
        assert_eq!(split(b"'a\\nb'"), Some(vec![b"a\\nb".to_vec()]));
        assert_eq!(split(b"a\x00b c"), Some(vec![b"a".to_vec()]));
        assert_eq!(split(b"\"open"), None);
        assert_eq!(split(b"'open"), None);
        assert_eq!(split(b"\"a\"b"), None);
        assert_eq!(split(b"'a'b"), None);
    }
}
