use super::*;
use proptest::prelude::*;

/// What feeding a stream produced: the requests, the last result, and
/// the bytes left in the buffer.
#[derive(Debug, PartialEq)]
struct Outcome {
    requests: Vec<Vec<Bytes>>,
    result: Result<(), ProtocolError>,
    leftover: Vec<u8>,
}

/// Feeds `stream` to a fresh decoder in chunks ending at `cuts` (sorted
/// positions), decoding after each chunk as the connection does, and
/// stopping at the first error.
fn feed_cut(limits: Limits, stream: &[u8], cuts: &[usize]) -> Outcome {
    let mut decoder = RequestDecoder::new(limits);
    let mut buf = BytesMut::new();
    let mut requests = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&stream.len())) {
        let end = end.clamp(start, stream.len());
        buf.extend_from_slice(&stream[start..end]);
        start = end;
        if let Err(error) = decoder.decode(&mut buf, &mut requests) {
            return Outcome {
                requests,
                result: Err(error),
                leftover: buf.to_vec(),
            };
        }
    }
    Outcome {
        requests,
        result: Ok(()),
        leftover: buf.to_vec(),
    }
}

fn feed(limits: Limits, stream: &[u8]) -> Outcome {
    feed_cut(limits, stream, &[])
}

fn feed_bytewise(limits: Limits, stream: &[u8]) -> Outcome {
    let cuts: Vec<usize> = (1..stream.len()).collect();
    feed_cut(limits, stream, &cuts)
}

fn request(args: &[&[u8]]) -> Vec<Bytes> {
    args.iter().map(|a| Bytes::copy_from_slice(a)).collect()
}

/// The requests a stream of complete, valid requests must decode to.
fn decodes_to(stream: &[u8], expected: &[Vec<Bytes>]) {
    let outcome = feed(Limits::default(), stream);
    assert_eq!(
        outcome.result,
        Ok(()),
        "stream {:?}",
        stream.escape_ascii().to_string()
    );
    assert_eq!(
        outcome.requests,
        expected,
        "stream {:?}",
        stream.escape_ascii().to_string()
    );
    assert!(outcome.leftover.is_empty());
}

/// The error a stream must fail with, whether it arrives at once or byte
/// by byte, with the requests before the error decoded.
fn fails_with(limits: Limits, stream: &[u8], before: &[Vec<Bytes>], error: ProtocolError) {
    for outcome in [feed(limits, stream), feed_bytewise(limits, stream)] {
        let shown = stream.escape_ascii().to_string();
        assert_eq!(outcome.result, Err(error.clone()), "stream {shown:?}");
        assert_eq!(outcome.requests, before, "stream {shown:?}");
    }
}

fn incomplete(limits: Limits, stream: &[u8]) {
    let outcome = feed(limits, stream);
    let shown = stream.escape_ascii().to_string();
    assert_eq!(outcome.result, Ok(()), "stream {shown:?}");
    assert!(outcome.requests.is_empty(), "stream {shown:?}");
    assert_eq!(outcome.leftover, stream, "stream {shown:?}");
}

fn small(max_inline_len: usize, max_args: usize, max_bulk_len: usize) -> Limits {
    Limits {
        max_bulk_len,
        max_args,
        max_inline_len,
        unauthenticated: false,
    }
}

fn args(words: &[&str]) -> Vec<Bytes> {
    words
        .iter()
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

#[test]
fn unauthenticated_clients_get_redis_smaller_limits() {
    let strict = Limits {
        unauthenticated: true,
        ..Limits::default()
    };
    let ten = format!("*10\r\n{}", "$1\r\na\r\n".repeat(10));
    assert_eq!(feed(strict, ten.as_bytes()).requests.len(), 1);
    fails_with(
        strict,
        b"*11\r\n",
        &[],
        ProtocolError::UnauthenticatedMultibulkLength,
    );
    let longest = format!("*1\r\n$16384\r\n{}\r\n", "x".repeat(16384));
    assert_eq!(feed(strict, longest.as_bytes()).requests.len(), 1);
    fails_with(
        strict,
        b"*2\r\n$4\r\nAUTH\r\n$16385\r\n",
        &[],
        ProtocolError::UnauthenticatedBulkLength,
    );
    assert_eq!(
        ProtocolError::UnauthenticatedBulkLength.message(),
        "ERR Protocol error: unauthenticated bulk length"
    );
    // The usual limits still apply beyond them.
    fails_with(
        strict,
        b"*x\r\n",
        &[],
        ProtocolError::InvalidMultibulkLength,
    );
}

#[test]
fn decode_one_stops_after_a_request_so_limits_can_change() {
    let strict = Limits {
        unauthenticated: true,
        ..Limits::default()
    };
    let mut decoder = RequestDecoder::new(strict);
    let mut stream = BytesMut::from(&b"\r\nAUTH pw\r\n*1\r\n$16385\r\n"[..]);
    let mut out = Vec::new();
    decoder.decode_one(&mut stream, &mut out).unwrap();
    // The blank line counts for nothing; AUTH is the one request.
    assert_eq!(out, vec![args(&["AUTH", "pw"])]);
    assert_eq!(&stream[..], b"*1\r\n$16385\r\n");
    decoder.set_limits(Limits::default());
    out.clear();
    decoder.decode_one(&mut stream, &mut out).unwrap();
    assert!(out.is_empty(), "the 16385-byte argument is awaited");
}

// ---- multibulk ----

#[test]
fn multibulk_request() {
    decodes_to(
        b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n",
        &[request(&[b"SET", b"k", b"value"])],
    );
}

#[test]
fn bulk_data_may_hold_cr_lf_and_any_byte() {
    let data: &[u8] = b"a\r\nb\rc\n\0\xff*$\r\n";
    let mut stream = format!("*2\r\n$4\r\nECHO\r\n${}\r\n", data.len()).into_bytes();
    stream.extend_from_slice(data);
    stream.extend_from_slice(b"\r\n");
    decodes_to(&stream, &[request(&[b"ECHO", data])]);
}

#[test]
fn empty_bulk_strings() {
    decodes_to(
        b"*3\r\n$0\r\n\r\n$1\r\nx\r\n$0\r\n\r\n",
        &[request(&[b"", b"x", b""])],
    );
}

#[test]
fn zero_and_negative_counts_are_empty_requests() {
    decodes_to(
        b"*0\r\n*-1\r\n*-9223372036854775808\r\n*1\r\n$4\r\nPING\r\n*0\r\n",
        &[request(&[b"PING"])],
    );
}

#[test]
fn multibulk_count_is_parsed_like_string2ll() {
    let limits = Limits::default();
    for header in [
        &b"*\r\n"[..],
        b"*+1\r\n",
        b"*01\r\n",
        b"*00\r\n",
        b"* 1\r\n",
        b"*1 \r\n",
        b"*-\r\n",
        b"*-0\r\n",
        b"*-01\r\n",
        b"*1a\r\n",
        b"*0x1\r\n",
        b"*9223372036854775808\r\n",
        b"*-9223372036854775809\r\n",
        b"*123456789012345678901\r\n",
    ] {
        fails_with(limits, header, &[], ProtocolError::InvalidMultibulkLength);
    }
}

#[test]
fn multibulk_count_above_max_args_is_refused() {
    let limits = small(64, 3, 64);
    let ok = b"*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n";
    assert_eq!(feed(limits, ok).requests, [request(&[b"a", b"b", b"c"])]);
    fails_with(
        limits,
        b"*4\r\n",
        &[],
        ProtocolError::InvalidMultibulkLength,
    );
    fails_with(
        limits,
        b"*9223372036854775807\r\n",
        &[],
        ProtocolError::InvalidMultibulkLength,
    );
}

#[test]
fn bulk_length_is_parsed_like_string2ll() {
    let limits = Limits::default();
    for header in [
        &b"$\r\n"[..],
        b"$+1\r\n",
        b"$01\r\n",
        b"$-1\r\n",
        b"$-0\r\n",
        b"$-5\r\n",
        b"$ 1\r\n",
        b"$1 \r\n",
        b"$1x\r\n",
        b"$99999999999999999999\r\n",
    ] {
        let mut stream = b"*1\r\n".to_vec();
        stream.extend_from_slice(header);
        fails_with(limits, &stream, &[], ProtocolError::InvalidBulkLength);
    }
}

#[test]
fn bulk_length_above_max_bulk_len_is_refused() {
    let limits = small(64, 8, 5);
    let ok = b"*1\r\n$5\r\nabcde\r\n";
    assert_eq!(feed(limits, ok).requests, [request(&[b"abcde"])]);
    fails_with(
        limits,
        b"*1\r\n$6\r\n",
        &[],
        ProtocolError::InvalidBulkLength,
    );
}

#[test]
fn argument_must_start_with_dollar() {
    let limits = Limits::default();
    fails_with(
        limits,
        b"*1\r\n:1\r\n",
        &[],
        ProtocolError::ExpectedDollar(b':'),
    );
    // Refused on its first byte: the rest of the line is not awaited.
    fails_with(
        limits,
        b"*2\r\n$1\r\na\r\nX",
        &[],
        ProtocolError::ExpectedDollar(b'X'),
    );
    // A request that announced too few arguments runs into the next one.
    fails_with(
        limits,
        b"*2\r\n$4\r\nPING\r\n*1\r\n$4\r\nPING\r\n",
        &[],
        ProtocolError::ExpectedDollar(b'*'),
    );
    fails_with(
        limits,
        b"*1\r\n\r\n",
        &[],
        ProtocolError::ExpectedDollar(b'\r'),
    );
}

#[test]
fn header_cr_must_be_followed_by_lf() {
    let limits = Limits::default();
    incomplete(limits, b"*1\r");
    fails_with(
        limits,
        b"*1\rX",
        &[],
        ProtocolError::MultibulkLengthNotTerminated,
    );
    fails_with(
        limits,
        b"*0\r\r\n",
        &[],
        ProtocolError::MultibulkLengthNotTerminated,
    );
    incomplete(limits, b"*1\r\n$1\r");
    fails_with(
        limits,
        b"*1\r\n$1\rXa\r\n",
        &[],
        ProtocolError::BulkLengthNotTerminated,
    );
    fails_with(
        limits,
        b"*1\r\n$1\r\r\na\r\n",
        &[],
        ProtocolError::BulkLengthNotTerminated,
    );
}

#[test]
fn bulk_data_must_be_followed_by_crlf() {
    let limits = Limits::default();
    incomplete(limits, b"*1\r\n$3\r\nabc");
    incomplete(limits, b"*1\r\n$3\r\nabc\r");
    for stream in [
        &b"*1\r\n$3\r\nabcX\n"[..],
        b"*1\r\n$3\r\nabc\rX",
        b"*1\r\n$3\r\nabc\n\r",
        b"*1\r\n$3\r\nabcd\r\n",
        b"*1\r\n$3\r\nab\r\nX",
        b"*2\r\n$0\r\nx\r\n$0\r\n\r\n",
    ] {
        fails_with(limits, stream, &[], ProtocolError::BulkDataNotTerminated);
    }
}

#[test]
fn too_big_mbulk_count_string() {
    let limits = small(4, 10_000, 64);
    // A header line of exactly the limit is fine.
    assert_eq!(feed(limits, b"*100\r\n").result, Ok(()));
    fails_with(limits, b"*1000", &[], ProtocolError::TooBigMultibulkCount);
    // The verdict does not depend on whether the `\r` was already read.
    fails_with(
        limits,
        b"*1000\r\n",
        &[],
        ProtocolError::TooBigMultibulkCount,
    );
    let mut garbage = b"*".to_vec();
    garbage.resize(Limits::default().max_inline_len + 1, b'a');
    incomplete(Limits::default(), &garbage[..garbage.len() - 1]);
    fails_with(
        Limits::default(),
        &garbage,
        &[],
        ProtocolError::TooBigMultibulkCount,
    );
}

#[test]
fn too_big_bulk_count_string() {
    let limits = small(4, 10, 10_000);
    let ok = b"*1\r\n$100\r\n";
    assert_eq!(feed(limits, ok).result, Ok(()));
    fails_with(limits, b"*1\r\n$1000", &[], ProtocolError::TooBigBulkCount);
    fails_with(
        limits,
        b"*1\r\n$1000\r\n",
        &[],
        ProtocolError::TooBigBulkCount,
    );
    let mut garbage = b"*1\r\n$".to_vec();
    garbage.resize(4 + Limits::default().max_inline_len + 1, b'7');
    incomplete(Limits::default(), &garbage[..garbage.len() - 1]);
    fails_with(
        Limits::default(),
        &garbage,
        &[],
        ProtocolError::TooBigBulkCount,
    );
}

#[test]
fn huge_bulk_header_is_refused_after_the_header_alone() {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut out = Vec::new();
    let mut buf = BytesMut::from(&b"*1\r\n$1099511627776\r\n"[..]);
    let capacity = buf.capacity();
    assert_eq!(
        decoder.decode(&mut buf, &mut out),
        Err(ProtocolError::InvalidBulkLength)
    );
    assert!(out.is_empty());
    assert_eq!(buf.capacity(), capacity, "nothing reserved for the data");
}

/// Feeds `stream` byte by byte and returns the position of the byte
/// that drew the error.
fn error_position(stream: &[u8]) -> Option<usize> {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut out = Vec::new();
    let mut buf = BytesMut::new();
    stream.iter().position(|&b| {
        buf.extend_from_slice(&[b]);
        decoder.decode(&mut buf, &mut out).is_err()
    })
}

#[test]
fn huge_headers_are_refused_at_their_cr() {
    let bulk = b"*1\r\n$1099511627776\r\n";
    assert_eq!(error_position(bulk), Some(bulk.len() - 2));
    let multibulk = b"*1000000000\r\n";
    assert_eq!(error_position(multibulk), Some(multibulk.len() - 2));
}

#[test]
fn huge_multibulk_header_is_refused_after_the_header_alone() {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut out = Vec::new();
    let mut buf = BytesMut::from(&b"*1000000000\r\n"[..]);
    assert_eq!(
        decoder.decode(&mut buf, &mut out),
        Err(ProtocolError::InvalidMultibulkLength)
    );
    assert!(out.is_empty());
}

#[test]
fn announced_argument_count_is_not_preallocated() {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut out = Vec::new();
    let mut buf = BytesMut::from(&b"*1048576\r\n"[..]);
    assert_eq!(decoder.decode(&mut buf, &mut out), Ok(()));
    match &decoder.state {
        State::Args(request) => {
            assert_eq!(request.expected, 1_048_576);
            assert!(request.args.capacity() <= ARGS_PREALLOC_CAP);
        }
        other => panic!("unexpected state {other:?}"),
    }
}

#[test]
fn partial_multibulk_keeps_its_progress() {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut out = Vec::new();
    let mut buf = BytesMut::from(&b"*3\r\n$1\r\na\r\n$2\r\nb"[..]);
    decoder.decode(&mut buf, &mut out).unwrap();
    assert!(out.is_empty());
    match &decoder.state {
        State::Args(request) => {
            assert_eq!(request.args, vec![Range { start: 8, end: 9 }]);
            assert_eq!(request.next, 15);
            assert_eq!(request.bulk_len, Some(2));
        }
        other => panic!("unexpected state {other:?}"),
    }
    buf.extend_from_slice(b"c\r\n$1");
    decoder.decode(&mut buf, &mut out).unwrap();
    match &decoder.state {
        State::Args(request) => {
            assert_eq!(request.args, [8..9, 15..17]);
            assert_eq!(request.next, 19);
            assert_eq!(request.bulk_len, None);
            assert_eq!(
                request.scanned, 2,
                "the header's bytes are not searched again"
            );
        }
        other => panic!("unexpected state {other:?}"),
    }
    buf.extend_from_slice(b"\r\nd\r\n");
    decoder.decode(&mut buf, &mut out).unwrap();
    assert_eq!(out, [request(&[b"a", b"bc", b"d"])]);
    assert!(buf.is_empty());
}

#[test]
fn big_bulk_in_small_reads() {
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut stream = format!("*2\r\n$3\r\nSET\r\n${}\r\n", data.len()).into_bytes();
    stream.extend_from_slice(&data);
    stream.extend_from_slice(b"\r\n");
    let cuts: Vec<usize> = (1..stream.len()).step_by(1000).collect();
    let outcome = feed_cut(Limits::default(), &stream, &cuts);
    assert_eq!(outcome.result, Ok(()));
    assert_eq!(outcome.requests, [request(&[b"SET", &data])]);
}

#[test]
fn multibulk_arguments_are_slices_of_the_buffer() {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut out = Vec::new();
    let mut buf = BytesMut::from(&b"*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n"[..]);
    let base = buf.as_ptr() as usize;
    decoder.decode(&mut buf, &mut out).unwrap();
    assert_eq!(out[0][0].as_ptr() as usize, base + 8);
    assert_eq!(out[0][1].as_ptr() as usize, base + 18);
}

// ---- inline ----

#[test]
fn inline_request() {
    decodes_to(b"PING\r\n", &[request(&[b"PING"])]);
    decodes_to(b"SET k v\n", &[request(&[b"SET", b"k", b"v"])]);
    decodes_to(b"  SET \t k   v \t\r\n", &[request(&[b"SET", b"k", b"v"])]);
}

#[test]
fn blank_inline_lines_produce_nothing() {
    decodes_to(b"\r\n\n   \t \r\n\x0b\x0c\n", &[]);
}

#[test]
fn only_the_trailing_cr_is_stripped_and_inner_crs_separate() {
    decodes_to(b"a\rb\r\r\n", &[request(&[b"a", b"b"])]);
}

#[test]
fn inline_line_may_end_without_cr() {
    decodes_to(b"a b\nc\r\n", &[request(&[b"a", b"b"]), request(&[b"c"])]);
}

#[test]
fn double_quote_escapes() {
    decodes_to(
        b"ECHO \"a\\nb\\rc\\td\\be\\af\\\\g\\\"h\\qi\"\r\n",
        &[request(&[b"ECHO", b"a\nb\rc\td\x08e\x07f\\g\"hqi"])],
    );
}

#[test]
fn hex_escapes() {
    decodes_to(
        b"\"\\x41\\x7a\\x00\\xfF\\xAb\"\r\n",
        &[request(&[b"Az\0\xff\xab"])],
    );
    // Without two hex digits, `\x` is just an escaped `x`.
    decodes_to(
        b"\"\\xZZ\" \"\\x4\" \"\\x4g\"\r\n",
        &[request(&[b"xZZ", b"x4", b"x4g"])],
    );
}

#[test]
fn single_quotes_only_escape_a_single_quote() {
    decodes_to(
        b"'a\\'b' 'c\\nd' 'e\"f' 'g\\\\h'\r\n",
        &[request(&[b"a'b", b"c\\nd", b"e\"f", b"g\\\\h"])],
    );
}

#[test]
fn backslash_outside_quotes_is_literal() {
    decodes_to(b"a\\nb \\x41\r\n", &[request(&[b"a\\nb", b"\\x41"])]);
}

#[test]
fn quotes_may_start_inside_an_argument() {
    decodes_to(
        b"foo\"bar baz\" a'b c' x\"\\x41\"\r\n",
        &[request(&[b"foobar baz", b"ab c", b"xA"])],
    );
}

#[test]
fn empty_quotes_are_empty_arguments() {
    decodes_to(b"\"\" ''\r\n", &[request(&[b"", b""])]);
}

#[test]
fn closing_quote_may_be_followed_by_any_c_whitespace() {
    decodes_to(
        b"\"a\"\tb \"c\"\x0bd 'e'\x0cf \"g\"\r\n",
        &[request(&[b"a", b"b", b"c", b"d", b"e", b"f", b"g"])],
    );
}

#[test]
fn vertical_tab_and_form_feed_are_skipped_between_but_kept_inside_arguments() {
    decodes_to(
        b"\x0ba\x0bb\x0cc d\r\n",
        &[request(&[b"a\x0bb\x0cc", b"d"])],
    );
}

#[test]
fn nul_ends_an_inline_line_as_in_a_c_string() {
    decodes_to(
        b"a b\0c d\r\ne\r\n",
        &[request(&[b"a", b"b"]), request(&[b"e"])],
    );
    decodes_to(b"\0x\r\n", &[]);
    fails_with(
        Limits::default(),
        b"\"a\0b\"\r\n",
        &[],
        ProtocolError::UnbalancedQuotes,
    );
}

#[test]
fn high_bytes_are_ordinary_argument_bytes() {
    decodes_to(
        b"\xff\x80 \xc3\xa9\r\n",
        &[request(&[b"\xff\x80", b"\xc3\xa9"])],
    );
}

#[test]
fn unbalanced_quotes() {
    for line in [
        &b"ECHO \"abc\r\n"[..],
        b"ECHO 'abc\r\n",
        b"ECHO \"abc\"def\r\n",
        b"ECHO 'abc'def\r\n",
        b"ECHO \"abc\"\"\r\n",
        b"ECHO \"abc\\\"\r\n",
        b"ECHO \"\\\r\n",
        b"ECHO 'abc\\'\r\n",
        b"\"\n",
    ] {
        fails_with(
            Limits::default(),
            line,
            &[],
            ProtocolError::UnbalancedQuotes,
        );
    }
}

#[test]
fn refused_inline_line_is_left_in_the_buffer() {
    let outcome = feed(Limits::default(), b"PING\r\n\"x\r\nPING\r\n");
    assert_eq!(outcome.result, Err(ProtocolError::UnbalancedQuotes));
    assert_eq!(outcome.requests, [request(&[b"PING"])]);
    assert_eq!(outcome.leftover, b"\"x\r\nPING\r\n");
}

#[test]
fn too_big_inline_request() {
    let limits = small(8, 8, 8);
    assert_eq!(
        feed(limits, b"12345678\n").requests,
        [request(&[b"12345678"])]
    );
    // The limit counts every byte before the `\n`, a trailing `\r` too.
    assert_eq!(
        feed(limits, b"1234567\r\n").requests,
        [request(&[b"1234567"])]
    );
    incomplete(limits, b"12345678");
    fails_with(
        limits,
        b"123456789",
        &[],
        ProtocolError::TooBigInlineRequest,
    );
    fails_with(
        limits,
        b"12345678\r\n",
        &[],
        ProtocolError::TooBigInlineRequest,
    );
    fails_with(
        limits,
        b"123456789\n",
        &[],
        ProtocolError::TooBigInlineRequest,
    );
    let long = vec![b'a'; Limits::default().max_inline_len + 1];
    fails_with(
        Limits::default(),
        &long,
        &[],
        ProtocolError::TooBigInlineRequest,
    );
}

#[test]
fn partial_inline_line_is_scanned_once() {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut out = Vec::new();
    let mut buf = BytesMut::from(&b"SET key"[..]);
    decoder.decode(&mut buf, &mut out).unwrap();
    assert!(matches!(decoder.state, State::Inline { scanned: 7 }));
    buf.extend_from_slice(b" value\r\n");
    decoder.decode(&mut buf, &mut out).unwrap();
    assert_eq!(out, [request(&[b"SET", b"key", b"value"])]);
}

// ---- streams and errors ----

#[test]
fn pipelined_mix_of_inline_and_multibulk() {
    decodes_to(
        b"PING\r\n*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\n\r\n*0\r\nECHO \"x y\"\n*-1\r\n*1\r\n$4\r\nQUIT\r\n",
        &[
            request(&[b"PING"]),
            request(&[b"ECHO", b"a\r\n"]),
            request(&[b"ECHO", b"x y"]),
            request(&[b"QUIT"]),
        ],
    );
}

#[test]
fn incomplete_request_stays_in_the_buffer() {
    let outcome = feed(Limits::default(), b"PING\r\n*1\r\n$4\r\nPI");
    assert_eq!(outcome.result, Ok(()));
    assert_eq!(outcome.requests, [request(&[b"PING"])]);
    assert_eq!(outcome.leftover, b"*1\r\n$4\r\nPI");
}

#[test]
fn requests_before_an_error_are_decoded() {
    fails_with(
        Limits::default(),
        b"PING\r\n*1\r\n$4\r\nECHO\r\n*1\r\n$x\r\n*1\r\n$4\r\nPING\r\n",
        &[request(&[b"PING"]), request(&[b"ECHO"])],
        ProtocolError::InvalidBulkLength,
    );
}

#[test]
fn decoder_stays_failed_after_an_error() {
    let mut decoder = RequestDecoder::new(Limits::default());
    let mut out = Vec::new();
    let mut buf = BytesMut::from(&b"*x\r\n"[..]);
    let error = Err(ProtocolError::InvalidMultibulkLength);
    assert_eq!(decoder.decode(&mut buf, &mut out), error);
    buf.clear();
    buf.extend_from_slice(b"PING\r\n");
    assert_eq!(decoder.decode(&mut buf, &mut out), error);
    assert!(out.is_empty());
}

#[test]
fn error_messages() {
    let cases = [
        (
            ProtocolError::TooBigInlineRequest,
            "ERR Protocol error: too big inline request",
        ),
        (
            ProtocolError::UnbalancedQuotes,
            "ERR Protocol error: unbalanced quotes in request",
        ),
        (
            ProtocolError::TooBigMultibulkCount,
            "ERR Protocol error: too big mbulk count string",
        ),
        (
            ProtocolError::InvalidMultibulkLength,
            "ERR Protocol error: invalid multibulk length",
        ),
        (
            ProtocolError::MultibulkLengthNotTerminated,
            r"ERR Protocol error: expected '\n' after '\r' in multibulk length",
        ),
        (
            ProtocolError::ExpectedDollar(b':'),
            "ERR Protocol error: expected '$', got ':'",
        ),
        (
            ProtocolError::ExpectedDollar(b' '),
            "ERR Protocol error: expected '$', got ' '",
        ),
        (
            ProtocolError::ExpectedDollar(b'\r'),
            "ERR Protocol error: expected '$', got ' '",
        ),
        (
            ProtocolError::ExpectedDollar(b'\n'),
            "ERR Protocol error: expected '$', got ' '",
        ),
        (
            ProtocolError::ExpectedDollar(0),
            r"ERR Protocol error: expected '$', got '\x00'",
        ),
        (
            ProtocolError::ExpectedDollar(0xff),
            r"ERR Protocol error: expected '$', got '\xff'",
        ),
        (
            ProtocolError::TooBigBulkCount,
            "ERR Protocol error: too big bulk count string",
        ),
        (
            ProtocolError::InvalidBulkLength,
            "ERR Protocol error: invalid bulk length",
        ),
        (
            ProtocolError::BulkLengthNotTerminated,
            r"ERR Protocol error: expected '\n' after '\r' in bulk length",
        ),
        (
            ProtocolError::BulkDataNotTerminated,
            r"ERR Protocol error: expected '\r\n' after bulk data",
        ),
    ];
    for (error, message) in cases {
        assert_eq!(error.message(), message);
        assert_eq!(error.to_string(), message);
        assert!(!message.contains(['\r', '\n']));
    }
}

// ---- chunking ----

/// A request as a client might send it.
#[derive(Clone, Debug)]
enum Sent {
    Multibulk(Vec<Vec<u8>>),
    Inline {
        args: Vec<String>,
        lead: String,
        sep: String,
        crlf: bool,
    },
    NullMultibulk,
}

impl Sent {
    fn encode(&self, stream: &mut Vec<u8>) {
        match self {
            Sent::Multibulk(args) => {
                stream.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
                for arg in args {
                    stream.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
                    stream.extend_from_slice(arg);
                    stream.extend_from_slice(b"\r\n");
                }
            }
            Sent::Inline {
                args,
                lead,
                sep,
                crlf,
            } => {
                stream.extend_from_slice(lead.as_bytes());
                stream.extend_from_slice(args.join(sep).as_bytes());
                stream.extend_from_slice(if *crlf { b"\r\n" } else { b"\n" });
            }
            Sent::NullMultibulk => stream.extend_from_slice(b"*-1\r\n"),
        }
    }

    fn expected(&self) -> Option<Vec<Bytes>> {
        let args: Vec<Bytes> = match self {
            Sent::Multibulk(args) => args.iter().map(|a| Bytes::copy_from_slice(a)).collect(),
            Sent::Inline { args, .. } => args
                .iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect(),
            Sent::NullMultibulk => Vec::new(),
        };
        (!args.is_empty()).then_some(args)
    }
}

fn any_arg() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40),
        // Bytes that look like protocol, to catch a decoder that peeks into data.
        prop::collection::vec(prop::sample::select(&b"\r\n$*0-"[..]), 0..10),
    ]
}

fn any_sent() -> impl Strategy<Value = Sent> {
    prop_oneof![
        4 => prop::collection::vec(any_arg(), 0..6).prop_map(Sent::Multibulk),
        3 => (
            prop::collection::vec("[A-Za-z0-9_.:-]{1,12}", 0..5),
            "[ \t]{0,2}",
            "[ \t]{1,3}",
            any::<bool>(),
        )
            .prop_map(|(args, lead, sep, crlf)| Sent::Inline { args, lead, sep, crlf }),
        1 => Just(Sent::NullMultibulk),
    ]
}

fn encode_all(sent: &[Sent]) -> (Vec<u8>, Vec<Vec<Bytes>>) {
    let mut stream = Vec::new();
    for s in sent {
        s.encode(&mut stream);
    }
    (stream, sent.iter().filter_map(Sent::expected).collect())
}

/// Input made of protocol-like pieces, mostly malformed.
fn any_garbage() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        (0..4u8).prop_map(|n| format!("*{n}\r\n").into_bytes()),
        (0..7u8).prop_map(|n| format!("${n}\r\n").into_bytes()),
        Just(b"*".to_vec()),
        Just(b"$".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\"".to_vec()),
        Just(b"'".to_vec()),
        Just(b"\\".to_vec()),
        Just(b"\\x4".to_vec()),
        Just(b" ".to_vec()),
        Just(b"-".to_vec()),
        Just(b"\0".to_vec()),
        "[0-9]{1,3}".prop_map(String::into_bytes),
        "[a-z]{1,3}".prop_map(String::into_bytes),
        any::<u8>().prop_map(|b| vec![b]),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

fn cut_points(len: usize, picks: &[prop::sample::Index]) -> Vec<usize> {
    let mut cuts: Vec<usize> = picks.iter().map(|i| i.index(len + 1)).collect();
    cuts.sort_unstable();
    cuts
}

proptest! {
    #[test]
    fn chunking_does_not_change_the_requests(
        sent in prop::collection::vec(any_sent(), 0..12),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 0..30),
    ) {
        let (stream, expected) = encode_all(&sent);
        let cuts = cut_points(stream.len(), &picks);
        let outcome = feed_cut(Limits::default(), &stream, &cuts);
        prop_assert_eq!(outcome.result, Ok(()));
        prop_assert_eq!(outcome.requests, expected);
        prop_assert!(outcome.leftover.is_empty());
    }

}

proptest! {
    // Malformed input has many more shapes than valid input.
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn chunking_does_not_change_the_outcome_of_any_input(
        garbage in any_garbage(),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 0..30),
    ) {
        let limits = small(12, 3, 5);
        let whole = feed(limits, &garbage);
        let chunked = feed_cut(limits, &garbage, &cut_points(garbage.len(), &picks));
        prop_assert_eq!(&whole.requests, &chunked.requests);
        prop_assert_eq!(&whole.result, &chunked.result);
        if whole.result.is_ok() {
            prop_assert_eq!(&whole.leftover, &chunked.leftover);
        }
    }

}

proptest! {
    #[test]
    fn any_bytes_survive_a_double_quoted_inline_argument(
        args in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..30), 1..4),
    ) {
        let mut line = Vec::new();
        for arg in &args {
            line.push(b'"');
            for &b in arg {
                match b {
                    b'"' => line.extend_from_slice(b"\\\""),
                    b'\\' => line.extend_from_slice(b"\\\\"),
                    b'\n' => line.extend_from_slice(b"\\n"),
                    b'\r' => line.extend_from_slice(b"\\r"),
                    b'\t' => line.extend_from_slice(b"\\t"),
                    0x20..=0x7e => line.push(b),
                    _ => line.extend_from_slice(format!("\\x{b:02X}").as_bytes()),
                }
            }
            line.extend_from_slice(b"\" ");
        }
        line.extend_from_slice(b"\r\n");
        let outcome = feed(Limits::default(), &line);
        prop_assert_eq!(outcome.result, Ok(()));
        let expected: Vec<Bytes> = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        prop_assert_eq!(outcome.requests, vec![expected]);
    }
}

/// A small stream with every kind of request, cut in every possible place.
fn mixed_stream() -> (Vec<u8>, Vec<Vec<Bytes>>) {
    encode_all(&[
        Sent::Inline {
            args: vec!["PING".into()],
            lead: String::new(),
            sep: " ".into(),
            crlf: true,
        },
        Sent::Multibulk(vec![b"ECHO".to_vec(), b"a\r\nb".to_vec(), Vec::new()]),
        Sent::Multibulk(Vec::new()),
        Sent::NullMultibulk,
        Sent::Inline {
            args: Vec::new(),
            lead: " ".into(),
            sep: " ".into(),
            crlf: false,
        },
        Sent::Inline {
            args: vec!["SET".into(), "k".into(), "v".into()],
            lead: "\t".into(),
            sep: " \t".into(),
            crlf: false,
        },
        Sent::Multibulk(vec![b"$1\r\n*".to_vec(), b"\0\xff".to_vec()]),
    ])
}

#[test]
fn every_single_split_point() {
    let (stream, expected) = mixed_stream();
    for cut in 0..=stream.len() {
        let outcome = feed_cut(Limits::default(), &stream, &[cut]);
        assert_eq!(outcome.result, Ok(()), "cut at {cut}");
        assert_eq!(outcome.requests, expected, "cut at {cut}");
        assert!(outcome.leftover.is_empty(), "cut at {cut}");
    }
}

#[test]
fn every_pair_of_split_points() {
    let (stream, expected) = mixed_stream();
    for first in 0..=stream.len() {
        for second in first..=stream.len() {
            let outcome = feed_cut(Limits::default(), &stream, &[first, second]);
            assert_eq!(outcome.requests, expected, "cuts at {first}, {second}");
            assert!(outcome.leftover.is_empty(), "cuts at {first}, {second}");
        }
    }
}

#[test]
fn byte_by_byte() {
    let (stream, expected) = mixed_stream();
    let outcome = feed_bytewise(Limits::default(), &stream);
    assert_eq!(outcome.result, Ok(()));
    assert_eq!(outcome.requests, expected);
}
