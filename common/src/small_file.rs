//! Reading the small files that specs and flags name: passwords, keys and
//! certificates, token files, specs. The one way Sluice reads such a file
//! whole.
//!
//! ```text
//!  path, Limits ─► reader thread: links followed ─► vet(real path) ─► regular file?
//!                                 ─► open (O_NONBLOCK, O_NOCTTY)
//!                                 ─► fstat: regular, size ≤ cap? ─► read at most cap + 1 bytes
//!              ◄─ bytes, or a reason ("is a named pipe (FIFO), not a regular file",
//!                 "is larger than 1 MiB", "was not read within 5s")
//! ```
//!
//! Invariants, enforced in [`read`]: only a regular file is opened for
//! reading (a named pipe would block the reader for good, a device such as
//! `/dev/zero` never ends); the type is checked before the open (opening
//! some devices does something) and again on the open file (the path may
//! have changed in between); no more than `max_bytes + 1` bytes are read,
//! whatever the file's size says; the caller waits at most `deadline` (a
//! file on a filesystem that stops answering leaves its reader thread
//! blocked, not the caller). A reason never holds the file's contents.

use std::fs::{FileType, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::time::Duration;

/// How large a file may be, and how long reading it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_bytes: u64,
    pub deadline: Duration,
}

impl Limits {
    /// Passwords, keys and certificates (a CA bundle of a few hundred
    /// certificates fits).
    pub const SECRET: Limits = Limits {
        max_bytes: 1 << 20,
        deadline: Duration::from_secs(5),
    };

    /// Token files and specs: as large as a gRPC message may be.
    pub const DOCUMENT: Limits = Limits {
        max_bytes: 4 << 20,
        deadline: Duration::from_secs(5),
    };
}

/// The bytes of the regular file at `path` (symbolic links followed), or
/// why not: a sentence that follows the path ("is a directory, not a
/// regular file"), for the caller to put after the field and the path.
pub fn read(path: &Path, limits: Limits) -> Result<Vec<u8>, String> {
    read_confined(path, limits, |_| Ok(()))
}

/// [`read`], once `vet` accepts the file's real path (symbolic links
/// followed); `vet`'s refusal is returned as it is.
pub fn read_confined(
    path: &Path,
    limits: Limits,
    vet: impl FnOnce(&Path) -> Result<(), String> + Send + 'static,
) -> Result<Vec<u8>, String> {
    let path = path.to_path_buf();
    within(limits.deadline, move || {
        let real = std::fs::canonicalize(&path).map_err(|e| format!("cannot be read: {e}"))?;
        vet(&real)?;
        read_now(&real, limits.max_bytes)
    })
}

/// [`read`], as UTF-8 text.
pub fn read_text(path: &Path, limits: Limits) -> Result<String, String> {
    String::from_utf8(read(path, limits)?).map_err(|_| "is not UTF-8 text".to_string())
}

/// Runs `work` on a thread of its own and waits for it at most `deadline`.
fn within<T: Send + 'static>(
    deadline: Duration,
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = sync_channel(1);
    std::thread::Builder::new()
        .name("sluice-small-file".into())
        .spawn(move || {
            // The caller may have stopped waiting: nobody to tell then.
            let _ = tx.send(work());
        })
        .map_err(|e| format!("cannot be read: no thread to read it ({e})"))?;
    match rx.recv_timeout(deadline) {
        Ok(result) => result,
        Err(RecvTimeoutError::Timeout) => Err(format!(
            "was not read within {deadline:?} (a filesystem that does not answer?)"
        )),
        Err(RecvTimeoutError::Disconnected) => Err("cannot be read: its reader stopped".into()),
    }
}

fn read_now(path: &Path, max_bytes: u64) -> Result<Vec<u8>, String> {
    let io = |e: std::io::Error| format!("cannot be read: {e}");
    regular(std::fs::metadata(path).map_err(io)?.file_type())?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    regular(meta.file_type())?;
    if meta.len() > max_bytes {
        return Err(too_large(max_bytes));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize + 1);
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(max_bytes));
    }
    Ok(bytes)
}

/// Refuses anything but a regular file, saying what it is.
fn regular(t: FileType) -> Result<(), String> {
    let what = if t.is_file() {
        return Ok(());
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a named pipe (FIFO)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    Err(format!("is {what}, not a regular file"))
}

fn too_large(max_bytes: u64) -> String {
    format!(
        "is larger than {}, the most such a file may hold",
        size(max_bytes)
    )
}

/// `bytes` in the largest binary unit that divides it.
pub fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const SMALL: Limits = Limits {
        max_bytes: 1 << 10,
        deadline: Duration::from_secs(5),
    };

    #[test]
    fn a_regular_file_up_to_the_cap_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, vec![b'x'; 1024]).unwrap();
        assert_eq!(read(&f, SMALL).unwrap().len(), 1024);
        std::os::unix::fs::symlink(&f, dir.path().join("link")).unwrap();
        assert_eq!(read(&dir.path().join("link"), SMALL).unwrap().len(), 1024);
        std::fs::write(&f, "text\n").unwrap();
        assert_eq!(read_text(&f, SMALL).unwrap(), "text\n");
        std::fs::write(&f, [0xff, 0xfe]).unwrap();
        assert_eq!(read_text(&f, SMALL).unwrap_err(), "is not UTF-8 text");
    }

    #[test]
    fn a_file_over_the_cap_is_refused_naming_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("big");
        std::fs::write(&f, vec![b'x'; 1025]).unwrap();
        let e = read(&f, SMALL).unwrap_err();
        assert!(e.contains("larger than 1 KiB"), "{e}");
        // A sparse file of a terabyte is refused as fast, unread.
        let sparse = std::fs::File::create(dir.path().join("sparse")).unwrap();
        sparse.set_len(1 << 40).unwrap();
        let started = Instant::now();
        let e = read(&dir.path().join("sparse"), Limits::SECRET).unwrap_err();
        assert!(e.contains("larger than 1 MiB"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn devices_pipes_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let started = Instant::now();
        for (path, what) in [
            (fifo.as_path(), "is a named pipe (FIFO), not a regular file"),
            (Path::new("/dev/zero"), "is a character device"),
            (Path::new("/dev/urandom"), "is a character device"),
            (dir.path(), "is a directory"),
        ] {
            let e = read(path, Limits::SECRET).unwrap_err();
            assert!(e.contains(what), "{}: {e}", path.display());
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        let e = read(&dir.path().join("missing"), SMALL).unwrap_err();
        assert!(e.starts_with("cannot be read: "), "{e}");
    }

    #[test]
    fn a_read_that_does_not_end_is_given_up_at_the_deadline() {
        let started = Instant::now();
        let e = within(Duration::from_millis(200), || {
            std::thread::sleep(Duration::from_secs(3));
            Ok(())
        })
        .unwrap_err();
        assert!(e.contains("was not read within 200ms"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(4 << 20), "4 MiB");
        assert_eq!(size(1 << 10), "1 KiB");
        assert_eq!(size(1000), "1000 bytes");
    }
}
