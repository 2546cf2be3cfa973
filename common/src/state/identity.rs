//! The identity a state file carries, checked when it is loaded: its
//! query, operator, partition and file (kind and version), and a checksum
//! of its rows, in a header line before the Arrow IPC stream.
//!
//! ```text
//!  SLUICE-STATE 1 {"query":"q","operator":"agg","partition":3,"file":"…07.delta","len":N,"xxh64":H}\n
//!  <Arrow IPC stream: len bytes>
//! ```
//!
//! A file copied from another partition, operator or query, a truncated
//! one, or one whose rows changed is refused, naming the file and what is
//! wrong, rather than merged into the state. The header is a pure function
//! of the file's place and rows, so a retried task writes the same bytes.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

const MAGIC: &[u8] = b"SLUICE-STATE 1 ";

/// Where a state file belongs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub query: String,
    pub operator: String,
    pub partition: u32,
    pub file: String,
}

#[derive(Serialize, Deserialize)]
struct Header {
    #[serde(flatten)]
    id: Identity,
    len: u64,
    xxh64: u64,
}

fn checksum(rows: &[u8]) -> u64 {
    twox_hash::XxHash64::oneshot(0, rows)
}

/// The header line of `id`'s file holding `rows`: the file is the header,
/// then the rows, written as two parts so that the rows are not copied.
pub fn header(id: &Identity, rows: &[u8]) -> Result<Bytes> {
    let header = Header {
        id: id.clone(),
        len: rows.len() as u64,
        xxh64: checksum(rows),
    };
    let json = serde_json::to_vec(&header).map_err(|e| Error::Encoding(e.to_string()))?;
    let mut out = Vec::with_capacity(MAGIC.len() + json.len() + 1);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&json);
    out.push(b'\n');
    Ok(Bytes::from(out))
}

/// `rows` behind the header of `id`, in one buffer.
#[cfg(test)]
fn wrap(id: &Identity, rows: &[u8]) -> Result<Bytes> {
    Ok([&header(id, rows)?[..], rows].concat().into())
}

/// The rows of a state file read from `path`, which should be `id`'s.
pub fn unwrap(id: &Identity, bytes: Bytes, path: &str) -> Result<Bytes> {
    let corrupt = |reason: String| Error::Corrupt {
        path: path.to_string(),
        reason,
    };
    let Some(rest) = bytes.strip_prefix(MAGIC) else {
        return Err(corrupt(
            "no state file header (a file from another program, or written before state files carried their identity)".into(),
        ));
    };
    let end = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| corrupt("the state file header never ends".into()))?;
    let header: Header = serde_json::from_slice(&rest[..end])
        .map_err(|e| corrupt(format!("the state file header is damaged: {e}")))?;
    if header.id != *id {
        return Err(corrupt(format!(
            "holds the state of query {:?}, operator {:?}, partition {}, file {}; \
             this is query {:?}, operator {:?}, partition {}, file {}",
            header.id.query,
            header.id.operator,
            header.id.partition,
            header.id.file,
            id.query,
            id.operator,
            id.partition,
            id.file
        )));
    }
    let rows = bytes.slice(MAGIC.len() + end + 1..);
    if rows.len() as u64 != header.len || checksum(&rows) != header.xxh64 {
        return Err(corrupt(format!(
            "its rows do not match its header ({} bytes where it says {}, or another checksum)",
            rows.len(),
            header.len
        )));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(partition: u32) -> Identity {
        Identity {
            query: "q".into(),
            operator: "agg".into(),
            partition,
            file: "00000000000000000007.delta".into(),
        }
    }

    #[test]
    fn a_file_reads_back_only_where_it_belongs_and_as_written() {
        let wrapped = wrap(&id(3), b"rows").unwrap();
        assert_eq!(wrap(&id(3), b"rows").unwrap(), wrapped, "deterministic");
        assert_eq!(unwrap(&id(3), wrapped.clone(), "p").unwrap(), &b"rows"[..]);
        let moved = unwrap(&id(1), wrapped.clone(), "p")
            .unwrap_err()
            .to_string();
        assert!(
            moved.contains("partition 3") && moved.contains("partition 1"),
            "{moved}"
        );
        let mut changed = wrapped.to_vec();
        *changed.last_mut().unwrap() = b'z';
        let e = unwrap(&id(3), changed.into(), "p").unwrap_err().to_string();
        assert!(e.contains("do not match its header"), "{e}");
        let e = unwrap(&id(3), Bytes::from_static(b"\xff\xff\xff\xffipc"), "p").unwrap_err();
        assert!(e.to_string().contains("no state file header"), "{e}");
    }
}
