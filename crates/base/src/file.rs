//! Local files that others could have planted or swapped, read by path
//! (a task, a profile, a schema): only a regular file, never more than a
//! cap. Opening a FIFO for reading waits for a writer, and a device such
//! as `/dev/zero` never ends, so a path that is one of those would hang or
//! flood the run; both are refused before a byte is read. What is read or
//! written inside a folder goes through [`Folder`].

use std::fmt;
use std::fs::FileType;
use std::io::{self, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

/// Whether a symbolic link at the path itself is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// The link's target is read when it is a regular file.
    Follow,
    /// A link is refused as not a regular file.
    Refuse,
}

/// Why a file was not read.
#[derive(Debug)]
pub enum FileError {
    Io(io::Error),
    /// What it is instead: "a FIFO", "a device", "a symbolic link", ….
    NotRegular(&'static str),
    /// Its size on disk is over the cap.
    TooLarge {
        len: u64,
        cap: u64,
    },
    /// It grew past the cap while it was read.
    Grew {
        cap: u64,
    },
}

/// A file in a folder that belongs to another user than this one or the
/// folder's owner: refused, as an `io::Error` of kind `PermissionDenied`
/// carrying this (see [`Foreign::of`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "it belongs to user {uid}, neither this user nor the folder's owner: another user may have put it there; remove it"
)]
pub struct Foreign {
    pub uid: u32,
}

impl Foreign {
    /// The foreign owner `e` names, when that is why it was refused.
    pub fn of(e: &io::Error) -> Option<&Foreign> {
        e.get_ref()?.downcast_ref::<Foreign>()
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::Io(e) => write!(f, "{e}"),
            FileError::NotRegular(what) => {
                write!(f, "not a regular file ({what}); it was not read")
            }
            FileError::TooLarge { len, cap } => write!(f, "it is {len} bytes; the limit is {cap}"),
            FileError::Grew { cap } => {
                write!(f, "it grew past the limit of {cap} bytes while it was read")
            }
        }
    }
}

/// The bytes of the regular file at `path`, at most `cap` of them.
pub fn read_regular(path: &Path, cap: u64, links: Links) -> Result<Vec<u8>, FileError> {
    let kind = match links {
        Links::Follow => std::fs::metadata(path),
        Links::Refuse => std::fs::symlink_metadata(path),
    }
    .map_err(FileError::Io)?
    .file_type();
    if !kind.is_file() {
        return Err(FileError::NotRegular(kind_of(kind)));
    }
    // The path may have changed since: O_NONBLOCK keeps a FIFO put in its
    // place from blocking the open, and the opened handle is checked again.
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
    if links == Links::Refuse {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| match e {
        Errno::LOOP if links == Links::Refuse => FileError::NotRegular("a symbolic link"),
        e => FileError::Io(e.into()),
    })?;
    read_opened(std::fs::File::from(fd), cap)
}

/// The bytes of an opened file, checked on the handle itself: a regular
/// file (a FIFO or device put in its place is refused), at most `cap`
/// bytes, whether it was that long when opened or grew while read.
pub(super) fn read_opened(file: std::fs::File, cap: u64) -> Result<Vec<u8>, FileError> {
    let meta = file.metadata().map_err(FileError::Io)?;
    if !meta.is_file() {
        return Err(FileError::NotRegular(kind_of(meta.file_type())));
    }
    if meta.len() > cap {
        return Err(FileError::TooLarge {
            len: meta.len(),
            cap,
        });
    }
    let mut bytes = Vec::new();
    file.take(cap.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(FileError::Io)?;
    if bytes.len() as u64 > cap {
        return Err(FileError::Grew { cap });
    }
    Ok(bytes)
}

fn kind_of(t: FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else if t.is_dir() {
        "a folder"
    } else {
        "not a plain file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn a_regular_file_is_read_up_to_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        std::fs::write(&p, "0123456789").unwrap();
        assert_eq!(read_regular(&p, 10, Links::Refuse).unwrap(), b"0123456789");
        match read_regular(&p, 9, Links::Refuse) {
            Err(FileError::TooLarge { len: 10, cap: 9 }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_without_waiting_or_reading() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f.json");
        mkfifo(&fifo);
        for (path, what) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a device"),
        ] {
            for links in [Links::Follow, Links::Refuse] {
                match read_regular(path, 1024, links) {
                    Err(FileError::NotRegular(w)) => assert_eq!(w, what),
                    other => panic!("{}: {other:?}", path.display()),
                }
            }
        }
        match read_regular(dir.path(), 1024, Links::Follow) {
            Err(e @ FileError::NotRegular("a folder")) => {
                assert_eq!(
                    e.to_string(),
                    "not a regular file (a folder); it was not read"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_link_is_followed_only_when_asked_and_only_to_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t.json");
        std::fs::write(&target, "{}").unwrap();
        let link = dir.path().join("l.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(read_regular(&link, 64, Links::Follow).unwrap(), b"{}");
        assert!(matches!(
            read_regular(&link, 64, Links::Refuse),
            Err(FileError::NotRegular("a symbolic link"))
        ));
        let to_zero = dir.path().join("z.json");
        std::os::unix::fs::symlink("/dev/zero", &to_zero).unwrap();
        assert!(matches!(
            read_regular(&to_zero, 64, Links::Follow),
            Err(FileError::NotRegular("a device"))
        ));
    }
}
