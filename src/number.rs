//! Numbers in arguments, parsed as Redis parses them.
//!
//! Clients send numbers as text; what counts as a number must match Redis
//! so the same argument means the same thing here and there.

/// A 64-bit integer as Redis's `string2ll` reads it: an optional `-`, then
/// digits with no leading zero (except `0` itself), nothing else, no
/// overflow. `+1`, `01`, ` 1`, `-0` and `1.0` are not integers.
pub fn parse_i64(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, text),
    };
    match digits {
        [] => return None,
        [b'0'] if !negative => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    // Accumulate as a negative number: its range includes i64::MIN.
    let mut value: i64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_sub(i64::from(byte - b'0'))?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// A finite double as Redis's `getDoubleFromObject` reads it: no leading
/// or trailing space, nothing after the number, and neither infinity nor
/// NaN (this registry only deals in finite times and durations).
pub fn parse_finite_f64(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    let first = text.bytes().next()?;
    if first.is_ascii_whitespace() {
        return None;
    }
    // Rust also reads words such as "inf" and "NaN"; the finiteness check
    // rejects them, which leaves the decimal forms strtod accepts.
    let value: f64 = text.parse().ok()?;
    value.is_finite().then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_follow_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"42"), Some(42));
        assert_eq!(parse_i64(b"-42"), Some(-42));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"01",
            b"-0",
            b" 1",
            b"1 ",
            b"1.0",
            b"1e3",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"12a",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn floats_are_finite_decimals() {
        assert_eq!(parse_finite_f64(b"10"), Some(10.0));
        assert_eq!(parse_finite_f64(b"10.5"), Some(10.5));
        assert_eq!(parse_finite_f64(b"-3"), Some(-3.0));
        assert_eq!(parse_finite_f64(b"1e3"), Some(1000.0));
        assert_eq!(parse_finite_f64(b".5"), Some(0.5));
        assert_eq!(parse_finite_f64(b"+2"), Some(2.0));
        for bad in [
            &b""[..],
            b" 1",
            b"1 ",
            b"abc",
            b"inf",
            b"-inf",
            b"nan",
            b"infinity",
            b"1e400",
            b"1,5",
            b"\xff",
        ] {
            assert_eq!(
                parse_finite_f64(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
