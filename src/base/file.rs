//! Local files that others could have planted or swapped. Reading one a
//! task, a profile or a record names: only a regular file, never more than
//! a cap. Opening a FIFO for reading waits for a writer, and a device such
//! as `/dev/zero` never ends, so a path that is one of those would hang or
//! flood the run; both are refused before a byte is read. Writing one
//! (report pages, the metrics textfile): a new temporary file in the same
//! folder, never opened through a link or over another file, then renamed
//! into place — a link planted at the name is replaced, never followed.

use std::fmt;
use std::fs::{FileType, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

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
    let mut flags = libc::O_NONBLOCK;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) if links == Links::Refuse => FileError::NotRegular("a symbolic link"),
            _ => FileError::Io(e),
        })?;
    read_opened(file, cap)
}

/// The bytes of an opened file, checked on the handle itself: a regular
/// file (a FIFO or device put in its place is refused), at most `cap`
/// bytes, whether it was that long when opened or grew while read.
fn read_opened(file: std::fs::File, cap: u64) -> Result<Vec<u8>, FileError> {
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

/// Writes `dir/name` whole through [`Folder::replace`]: `dir` is opened
/// first (not through a link), and the write stays in it.
pub fn replace(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    Folder::open(dir)?.replace(name, bytes, mode)
}

/// An opened folder: everything done through it stays in it, whatever is
/// renamed or linked along its path afterwards. A folder is opened without
/// following a link at its last step, each sub-folder likewise, so a walk
/// from a root reaches only real folders under it.
#[derive(Debug)]
pub struct Folder {
    fd: std::os::fd::OwnedFd,
}

impl Folder {
    const DIR_FLAGS: rustix::fs::OFlags = rustix::fs::OFlags::RDONLY
        .union(rustix::fs::OFlags::DIRECTORY)
        .union(rustix::fs::OFlags::NOFOLLOW)
        .union(rustix::fs::OFlags::CLOEXEC);

    /// The folder at `path`; a link there is refused (`ELOOP`/`ENOTDIR`).
    pub fn open(path: &Path) -> io::Result<Folder> {
        let fd = rustix::fs::openat(
            rustix::fs::CWD,
            path,
            Self::DIR_FLAGS,
            rustix::fs::Mode::empty(),
        )?;
        Ok(Folder { fd })
    }

    /// A folder the operator named (`[paths] logs`, `--out`): a link there
    /// is the operator's own and is followed; nothing below it is.
    pub fn open_root(path: &Path) -> io::Result<Folder> {
        let flags = Self::DIR_FLAGS.difference(rustix::fs::OFlags::NOFOLLOW);
        let fd = rustix::fs::openat(rustix::fs::CWD, path, flags, rustix::fs::Mode::empty())?;
        Ok(Folder { fd })
    }

    /// The entries here, each a real folder (`true`) or a link (`false`);
    /// anything else is left out. Nothing is followed.
    pub fn folders_and_links(&self) -> io::Result<Vec<(String, bool)>> {
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            let kind = match entry.file_type() {
                rustix::fs::FileType::Unknown => {
                    match rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    {
                        Ok(st) => rustix::fs::FileType::from_raw_mode(st.st_mode),
                        Err(_) => continue,
                    }
                }
                t => t,
            };
            match kind {
                rustix::fs::FileType::Directory => out.push((name.to_string(), true)),
                rustix::fs::FileType::Symlink => out.push((name.to_string(), false)),
                _ => {}
            }
        }
        Ok(out)
    }

    /// Removes `name` here and, when it is a real folder, everything in
    /// it, each step through an opened folder: a link is removed as a
    /// link, never followed, whatever is renamed meanwhile.
    pub fn remove_tree(&self, name: &str) -> io::Result<()> {
        check_name(name)?;
        let sub = match self.sub(name) {
            Ok(sub) => sub,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {
                return Ok(rustix::fs::unlinkat(
                    &self.fd,
                    name,
                    rustix::fs::AtFlags::empty(),
                )?);
            }
            Err(e) => return Err(e),
        };
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&sub.fd)? {
            let entry = entry?;
            let entry_name = entry.file_name().to_string_lossy().into_owned();
            if entry_name != "." && entry_name != ".." {
                names.push(entry.file_name().to_owned());
            }
        }
        for entry in names {
            match rustix::fs::unlinkat(&sub.fd, entry.as_c_str(), rustix::fs::AtFlags::empty()) {
                Ok(()) => {}
                Err(rustix::io::Errno::ISDIR | rustix::io::Errno::PERM) => match entry.to_str() {
                    Ok(n) => sub.remove_tree(n)?,
                    Err(_) => rustix::fs::unlinkat(
                        &sub.fd,
                        entry.as_c_str(),
                        rustix::fs::AtFlags::REMOVEDIR,
                    )?,
                },
                Err(e) => return Err(e.into()),
            }
        }
        Ok(rustix::fs::unlinkat(
            &self.fd,
            name,
            rustix::fs::AtFlags::REMOVEDIR,
        )?)
    }

    /// The sub-folder `name`; a link is refused.
    pub fn sub(&self, name: &str) -> io::Result<Folder> {
        check_name(name)?;
        let fd = rustix::fs::openat(&self.fd, name, Self::DIR_FLAGS, rustix::fs::Mode::empty())?;
        Ok(Folder { fd })
    }

    /// The sub-folder `name`, made (with `mode`) when it is missing.
    pub fn sub_or_create(&self, name: &str, mode: u32) -> io::Result<Folder> {
        check_name(name)?;
        match rustix::fs::mkdirat(&self.fd, name, rustix::fs::Mode::from_raw_mode(mode)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => self.sub(name),
            Err(e) => Err(e.into()),
        }
    }

    /// Makes the sub-folder `name` (with `mode`, whatever the umask) and
    /// opens it; `AlreadyExists` when something has the name.
    pub fn create_sub(&self, name: &str, mode: u32) -> io::Result<Folder> {
        check_name(name)?;
        rustix::fs::mkdirat(&self.fd, name, rustix::fs::Mode::from_raw_mode(mode))?;
        let sub = self.sub(name)?;
        rustix::fs::fchmod(&sub.fd, rustix::fs::Mode::from_raw_mode(mode))?;
        Ok(sub)
    }

    /// Creates the file `name` here for appending (with `mode`, whatever
    /// the umask): never one already there, never through a link.
    pub fn create_file(&self, name: &str, mode: u32) -> io::Result<std::fs::File> {
        check_name(name)?;
        use rustix::fs::OFlags;
        let flags = OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, rustix::fs::Mode::from_raw_mode(mode))?;
        rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(mode))?;
        Ok(std::fs::File::from(fd))
    }

    /// Whether `name` is here at all (a link counts; it is not followed).
    pub fn has(&self, name: &str) -> bool {
        rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// When `name` here was last written (a link is not followed).
    pub fn modified(&self, name: &str) -> Option<std::time::SystemTime> {
        let st = rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok()?;
        let secs = u64::try_from(st.st_mtime).ok()?;
        let nanos = u32::try_from(st.st_mtime_nsec)
            .unwrap_or(0)
            .min(999_999_999);
        std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(secs, nanos))
    }

    /// The bytes of the regular file `name` here, at most `cap` of them:
    /// the rules of [`read_regular`] (no link, no FIFO or device).
    pub fn read(&self, name: &str, cap: u64) -> Result<Vec<u8>, FileError> {
        check_name(name).map_err(FileError::Io)?;
        use rustix::fs::OFlags;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name, flags, rustix::fs::Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::LOOP) => return Err(FileError::NotRegular("a symbolic link")),
            Err(e) => return Err(FileError::Io(e.into())),
        };
        read_opened(std::fs::File::from(fd), cap)
    }

    /// Writes `name` here whole: a new temporary file (O_EXCL | O_NOFOLLOW,
    /// `mode` whatever the umask), then a rename over the name, both inside
    /// this folder. A link at the name is replaced, never followed.
    pub fn replace(&self, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
        check_name(name)?;
        use rustix::fs::OFlags;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut last = None;
        for _ in 0..8 {
            let tmp = format!(
                ".{name}.{}-{:08x}.tmp",
                std::process::id(),
                fastrand::u32(..)
            );
            let fd = match rustix::fs::openat(
                &self.fd,
                tmp.as_str(),
                flags,
                rustix::fs::Mode::from_raw_mode(mode),
            ) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::EXIST) => {
                    last = Some(io::Error::from(rustix::io::Errno::EXIST));
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let written = rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(mode))
                .map_err(io::Error::from)
                .and_then(|()| std::fs::File::from(fd).write_all(bytes))
                .and_then(|()| {
                    rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name)
                        .map_err(io::Error::from)
                });
            if written.is_err() {
                let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), rustix::fs::AtFlags::empty());
            }
            return written;
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free temporary name")))
    }
}

/// One path step: not empty, `.` or `..`, and without a separator.
fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a file name"),
        ));
    }
    Ok(())
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

    #[test]
    fn remove_tree_removes_a_tree_and_never_what_a_link_in_it_points_to() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep.txt"), "keep").unwrap();
        let run = dir.path().join("run");
        std::fs::create_dir_all(run.join("a/b")).unwrap();
        std::fs::write(run.join("a/b/f.txt"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), run.join("a/link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("top-link")).unwrap();
        let folder = Folder::open(dir.path()).unwrap();

        folder.remove_tree("run").unwrap();
        folder.remove_tree("top-link").unwrap();

        assert!(!run.exists());
        assert!(std::fs::symlink_metadata(dir.path().join("top-link")).is_err());
        assert_eq!(
            std::fs::read_to_string(outside.path().join("keep.txt")).unwrap(),
            "keep"
        );
        assert!(folder.remove_tree("..").is_err());
    }

    #[test]
    fn an_opened_folder_keeps_its_writes_and_reads_when_its_path_is_swapped_for_a_link() {
        let root = tempfile::tempdir().unwrap();
        let a = root.path().join("a");
        let victim = root.path().join("victim");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(a.join("r.txt"), "mine").unwrap();
        std::fs::write(victim.join("r.txt"), "theirs").unwrap();
        let folder = Folder::open(&a).unwrap();
        // Swapped after it was opened: `a` is now a link to `victim`.
        std::fs::rename(&a, root.path().join("a.old")).unwrap();
        std::os::unix::fs::symlink(&victim, &a).unwrap();

        folder.replace("page.html", b"report", 0o600).unwrap();
        assert_eq!(folder.read("r.txt", 100).unwrap(), b"mine");

        assert_eq!(
            std::fs::read(root.path().join("a.old/page.html")).unwrap(),
            b"report"
        );
        assert!(
            !victim.join("page.html").exists(),
            "nothing landed through the link"
        );
        assert!(
            Folder::open(&a).is_err(),
            "the link itself is not opened as a folder"
        );
        assert!(matches!(
            folder.read("../victim/r.txt", 100),
            Err(FileError::Io(_))
        ));
    }

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
