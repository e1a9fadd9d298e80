//! `nimbus batch results`: download a batch's output (and error) file, optionally rewritten in the
//! order of the input file (servers write results in any order; lines are matched on
//! `custom_id`). The rewrite holds an index of offsets, never the files, in memory.

use super::console::CliError;
use serde::Deserialize;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// What a rewrite in input order did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reordered {
    /// Lines written.
    pub lines: u64,
    /// Lines whose `custom_id` is not in the input (written last, in their own order).
    pub not_in_input: u64,
}

#[derive(Deserialize)]
struct CustomId {
    #[serde(default)]
    custom_id: Option<String>,
}

/// The `custom_id` of a JSON line, if it has one.
fn custom_id_of(line: &[u8]) -> Option<String> {
    serde_json::from_slice::<CustomId>(line).ok()?.custom_id
}

/// Non-blank lines of `reader` with their byte offsets: `(offset, line without its newline)`.
fn for_each_line(
    reader: impl Read,
    path: &Path,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let mut reader = BufReader::with_capacity(256 * 1024, reader);
    let mut line = Vec::new();
    let mut offset = 0u64;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| CliError::io(path, &e))?;
        if read == 0 {
            return Ok(());
        }
        let text = line.trim_ascii_end();
        if !text.trim_ascii_start().is_empty() {
            each(offset, text)?;
        }
        offset += read as u64;
    }
}

/// Write the lines of `results` to `dest` in the order of the `custom_id`s of `input`.
pub fn reorder(results: &Path, input: &Path, dest: &Path) -> Result<Reordered, CliError> {
    // custom_id → where its line is in `results`; lines without one keep their order at the end.
    let mut index: HashMap<String, (u64, usize)> = HashMap::new();
    let mut unmatched: Vec<(u64, usize)> = Vec::new();
    let results_file = File::open(results).map_err(|e| CliError::io(results, &e))?;
    for_each_line(&results_file, results, |offset, line| {
        match custom_id_of(line) {
            Some(id) => {
                if let Some(earlier) = index.insert(id, (offset, line.len())) {
                    unmatched.push(earlier);
                }
            }
            None => unmatched.push((offset, line.len())),
        }
        Ok(())
    })?;
    let mut source = File::open(results).map_err(|e| CliError::io(results, &e))?;
    let mut out = BufWriter::new(File::create(dest).map_err(|e| CliError::io(dest, &e))?);
    let mut report = Reordered::default();
    let mut buffer = Vec::new();
    let mut copy = |(offset, len): (u64, usize), report: &mut Reordered| -> Result<(), CliError> {
        buffer.resize(len, 0);
        source
            .seek(SeekFrom::Start(offset))
            .map_err(|e| CliError::io(results, &e))?;
        source.read_exact(&mut buffer).map_err(|e| CliError::io(results, &e))?;
        out.write_all(&buffer).map_err(|e| CliError::io(dest, &e))?;
        out.write_all(b"\n").map_err(|e| CliError::io(dest, &e))?;
        report.lines += 1;
        Ok(())
    };
    let input_file = File::open(input).map_err(|e| CliError::io(input, &e))?;
    for_each_line(input_file, input, |_, line| {
        if let Some(found) = custom_id_of(line).and_then(|id| index.remove(&id)) {
            copy(found, &mut report)?;
        }
        Ok(())
    })?;
    let mut rest: Vec<(u64, usize)> = index.into_values().chain(unmatched).collect();
    rest.sort_unstable();
    for found in rest {
        copy(found, &mut report)?;
        report.not_in_input += 1;
    }
    out.into_inner()
        .map_err(|e| CliError::io(dest, e.error()))?
        .sync_all()
        .map_err(|e| CliError::io(dest, &e))?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `results` reordered by `input`: the report and the text written.
    fn reordered(input: &str, results: &str) -> (Reordered, String) {
        let dir = tempfile::tempdir().unwrap();
        let (input_path, results_path) = (dir.path().join("in.jsonl"), dir.path().join("out.raw"));
        std::fs::write(&input_path, input).unwrap();
        std::fs::write(&results_path, results).unwrap();
        let dest = dir.path().join("out.jsonl");
        let report = reorder(&results_path, &input_path, &dest).unwrap();
        (report, std::fs::read_to_string(&dest).unwrap())
    }

    #[test]
    fn results_are_rewritten_in_input_order() {
        // Any order; `c` is in the other file; `z` is not in the input.
        let (report, text) = reordered(
            "{\"custom_id\":\"a\"}\n\n{\"custom_id\":\"b\"}\n{\"custom_id\":\"c\"}\n{\"custom_id\":\"d\"}",
            "{\"custom_id\":\"d\",\"n\":4}\n{\"custom_id\":\"z\",\"n\":26}\n{\"custom_id\":\"a\",\"n\":1}\r\n{\"custom_id\":\"b\",\"n\":2}\n",
        );
        assert_eq!(
            report,
            Reordered {
                lines: 4,
                not_in_input: 1
            }
        );
        assert_eq!(
            text,
            "{\"custom_id\":\"a\",\"n\":1}\n{\"custom_id\":\"b\",\"n\":2}\n{\"custom_id\":\"d\",\"n\":4}\n{\"custom_id\":\"z\",\"n\":26}\n"
        );
    }

    #[test]
    fn lines_without_a_known_id_are_kept_at_the_end_in_their_order() {
        let (report, text) = reordered(
            "{\"custom_id\":\"a\"}\nnot json\n",
            "garbage\n{\"custom_id\":\"a\",\"n\":1}\n{\"custom_id\":\"a\",\"n\":2}\n{\"x\":1}\n",
        );
        assert_eq!(
            report,
            Reordered {
                lines: 4,
                not_in_input: 3
            }
        );
        // The later `a` wins the input's slot; the earlier one and the id-less lines follow.
        assert_eq!(
            text,
            "{\"custom_id\":\"a\",\"n\":2}\ngarbage\n{\"custom_id\":\"a\",\"n\":1}\n{\"x\":1}\n"
        );
    }
}
