//! JSON Lines as Nimbus stores them (batch inputs, results, pages): one JSON value per line, and a
//! blank line (only whitespace) is no line at all. The one splitter every reader of such a body
//! uses, so that all count and number the same lines.

use std::ops::Range;

/// The byte ranges of the non-blank lines of `bytes`, without their `\n`, in order.
pub(crate) fn line_ranges(bytes: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut start = 0;
    let mut done = false;
    std::iter::from_fn(move || {
        while !done {
            let end = match bytes[start..].iter().position(|b| *b == b'\n') {
                Some(at) => start + at,
                None => {
                    done = true;
                    bytes.len()
                }
            };
            let range = start..end;
            start = end + 1;
            if !bytes[range.clone()].trim_ascii().is_empty() {
                return Some(range);
            }
        }
        None
    })
}

/// The non-blank lines of `bytes`, without their `\n`, in order.
pub fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    line_ranges(bytes).map(move |range| &bytes[range])
}

/// The non-blank lines of `bytes`, without their `\n`, in order, as slices sharing its buffer.
pub(crate) fn line_bytes(bytes: &bytes::Bytes) -> Vec<bytes::Bytes> {
    line_ranges(bytes).map(|range| bytes.slice(range)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_lines_are_no_lines() {
        let body = b"{\"a\":1}\n\n  \n{\"b\":2}\r\n{\"c\":3}";
        let found: Vec<&[u8]> = lines(body).collect();
        assert_eq!(found, [&b"{\"a\":1}"[..], b"{\"b\":2}\r", b"{\"c\":3}"]);
        assert_eq!(lines(b"").count(), 0);
        assert_eq!(lines(b"\n\n").count(), 0);
        assert_eq!(lines(b"x\n").count(), 1);
        let ranges: Vec<Range<usize>> = line_ranges(b"ab\n\ncd\n").collect();
        assert_eq!(ranges, [0..2, 4..6]);
    }

    #[test]
    fn line_bytes_skip_blank_lines_and_keep_a_last_line_without_newline() {
        let input = bytes::Bytes::from_static(b"{\"a\":1}\n\n  \r\n{\"b\":2}\r\n{\"c\":3}");
        let lines: Vec<_> = line_bytes(&input).iter().map(|l| l.trim_ascii().to_vec()).collect();
        assert_eq!(
            lines,
            vec![b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec(), b"{\"c\":3}".to_vec()]
        );
        assert!(line_bytes(&bytes::Bytes::from_static(b"\n\n")).is_empty());
    }
}
