//! An opened folder: everything done through it stays in it, whatever is
//! renamed or linked along its path afterwards. A folder is opened without
//! following a link at its last step (each sub-folder likewise), so a walk
//! from a root reaches only real folders under it; only a root the
//! operator named may be reached through a link.
//!
//! What others may share with the harness — the state files beside the
//! inbox, the task folders, the records — is written and moved only
//! through here: a new file is created exclusively under an unpredictable
//! name, never through a link, and renamed into place; a move never
//! overwrites and reads its source from a descriptor that was opened
//! without following a link, across file systems too; a tree is removed
//! one opened folder at a time, never deeper than [`MAX_TREE_DEPTH`].

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::file::{FileError, Foreign, read_opened};

/// Folders deeper than this below a tree being removed are left, and
/// the removal says so: each level holds one open descriptor, and a
/// crafted tree could be any depth.
pub(crate) const MAX_TREE_DEPTH: usize = 64;

/// An opened folder (see the module's text).
#[derive(Debug)]
pub struct Folder {
    fd: OwnedFd,
}

/// What a name in a folder is, as the folder holds it: never followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Folder,
    Link,
    File,
    /// A FIFO, a socket, a device.
    Other,
}

impl EntryKind {
    fn of(kind: FileType) -> EntryKind {
        match kind {
            FileType::Directory => EntryKind::Folder,
            FileType::Symlink => EntryKind::Link,
            FileType::RegularFile => EntryKind::File,
            _ => EntryKind::Other,
        }
    }
}

/// The end of a file, as [`Folder::read_tail`] read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub bytes: Vec<u8>,
    /// The file was longer: `bytes` start inside it (most likely inside a line).
    pub cut: bool,
}

/// One name in a folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: OsString,
    pub kind: EntryKind,
}

impl Folder {
    const DIR_FLAGS: OFlags = OFlags::RDONLY
        .union(OFlags::DIRECTORY)
        .union(OFlags::NOFOLLOW)
        .union(OFlags::CLOEXEC);

    /// The folder at `path`; a link there is refused (`ELOOP`/`ENOTDIR`).
    pub fn open(path: &std::path::Path) -> io::Result<Folder> {
        let fd = rustix::fs::openat(rustix::fs::CWD, path, Self::DIR_FLAGS, Mode::empty())?;
        Ok(Folder { fd })
    }

    /// A folder the operator named (`[paths] logs`, the inbox's parent,
    /// `--out`): a link there is the operator's own and is followed;
    /// nothing below it is.
    pub fn open_root(path: &std::path::Path) -> io::Result<Folder> {
        let flags = Self::DIR_FLAGS.difference(OFlags::NOFOLLOW);
        let fd = rustix::fs::openat(rustix::fs::CWD, path, flags, Mode::empty())?;
        Ok(Folder { fd })
    }

    /// Every name here but `.` and `..`, with what it is. Nothing is followed.
    pub fn entries(&self) -> io::Result<Vec<Entry>> {
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let kind = match entry.file_type() {
                FileType::Unknown => {
                    match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(st) => FileType::from_raw_mode(st.st_mode),
                        Err(_) => continue,
                    }
                }
                t => t,
            };
            out.push(Entry {
                name: OsStr::from_bytes(name.to_bytes()).to_os_string(),
                kind: EntryKind::of(kind),
            });
        }
        Ok(out)
    }

    /// The entries here whose names are UTF-8, each a real folder (`true`)
    /// or a link (`false`); anything else is left out.
    pub fn folders_and_links(&self) -> io::Result<Vec<(String, bool)>> {
        Ok(self
            .entries()?
            .into_iter()
            .filter(|e| matches!(e.kind, EntryKind::Folder | EntryKind::Link))
            .filter_map(|e| Some((e.name.into_string().ok()?, e.kind == EntryKind::Folder)))
            .collect())
    }

    /// The sub-folder `name`; a link is refused.
    pub fn sub(&self, name: impl AsRef<OsStr>) -> io::Result<Folder> {
        let name = name.as_ref();
        check_name(name)?;
        let fd = rustix::fs::openat(&self.fd, name, Self::DIR_FLAGS, Mode::empty())?;
        Ok(Folder { fd })
    }

    /// The sub-folder `name`, made (with `mode`) when it is missing.
    pub fn sub_or_create(&self, name: &str, mode: u32) -> io::Result<Folder> {
        check_name(name.as_ref())?;
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) | Err(Errno::EXIST) => self.sub(name),
            Err(e) => Err(e.into()),
        }
    }

    /// Makes the sub-folder `name` (with `mode`, whatever the umask) and
    /// opens it; `AlreadyExists` when something has the name.
    pub fn create_sub(&self, name: &str, mode: u32) -> io::Result<Folder> {
        check_name(name.as_ref())?;
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode))?;
        let sub = self.sub(name)?;
        rustix::fs::fchmod(&sub.fd, Mode::from_raw_mode(mode))?;
        Ok(sub)
    }

    /// Creates the file `name` here for appending (with `mode`, whatever
    /// the umask): never one already there, never through a link.
    pub fn create_file(&self, name: &str, mode: u32) -> io::Result<File> {
        check_name(name.as_ref())?;
        let flags = OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
        Ok(File::from(fd))
    }

    /// The regular file `name` here, created (`0600` at most) when missing,
    /// opened to be locked: never through a link, never a FIFO, socket or
    /// device (opening one would wait, or do what the device does), never
    /// truncated, and only when this user or the folder's owner owns it
    /// (another user's file there, held locked, would stop every run).
    pub fn open_lock(&self, name: &str) -> io::Result<File> {
        check_name(name.as_ref())?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o600)) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => return Err(not_regular("a symbolic link")),
            Err(Errno::NXIO) => return Err(not_regular("a FIFO or a socket")),
            Err(e) => return Err(e.into()),
        };
        let st = rustix::fs::fstat(&fd)?;
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::RegularFile {
            return Err(not_regular(kind_of(kind)));
        }
        self.check_owner(st.st_uid)?;
        Ok(File::from(fd))
    }

    /// `Ok` when a file owned by `uid` here was put there by this user or
    /// the folder's owner; another user's file is refused, naming its owner.
    fn check_owner(&self, uid: u32) -> io::Result<()> {
        let folder_owner = rustix::fs::fstat(&self.fd)?.st_uid;
        if uid == rustix::process::geteuid().as_raw() || uid == folder_owner {
            return Ok(());
        }
        let foreign = Foreign { uid };
        Err(io::Error::new(io::ErrorKind::PermissionDenied, foreign))
    }

    /// What this folder is on disk (its device and inode): a folder put
    /// in its place under its name is another one.
    pub fn identity(&self) -> io::Result<(u64, u64)> {
        let st = rustix::fs::fstat(&self.fd)?;
        Ok((st.st_dev, st.st_ino))
    }

    /// What `name` here is and who owns it, the link itself when it is
    /// one; `None` when nothing has the name.
    pub fn kind_and_owner(&self, name: impl AsRef<OsStr>) -> Option<(EntryKind, u32)> {
        let st = rustix::fs::statat(&self.fd, name.as_ref(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
        Some((
            EntryKind::of(FileType::from_raw_mode(st.st_mode)),
            st.st_uid,
        ))
    }

    /// Who owns this folder.
    pub fn owner(&self) -> io::Result<u32> {
        Ok(rustix::fs::fstat(&self.fd)?.st_uid)
    }

    /// The owner of the link `name` here; `None` when it is no link (or
    /// not there).
    pub fn link_owner(&self, name: impl AsRef<OsStr>) -> Option<u32> {
        let st = rustix::fs::statat(&self.fd, name.as_ref(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
        (FileType::from_raw_mode(st.st_mode) == FileType::Symlink).then_some(st.st_uid)
    }

    /// Whether `name` is here at all (a link counts; it is not followed).
    pub fn has(&self, name: impl AsRef<OsStr>) -> bool {
        rustix::fs::statat(&self.fd, name.as_ref(), AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// When `name` here was last written (a link is not followed).
    pub fn modified(&self, name: impl AsRef<OsStr>) -> Option<std::time::SystemTime> {
        let st = rustix::fs::statat(&self.fd, name.as_ref(), AtFlags::SYMLINK_NOFOLLOW).ok()?;
        let secs = u64::try_from(st.st_mtime).ok()?;
        let nanos = u32::try_from(st.st_mtime_nsec)
            .unwrap_or(0)
            .min(999_999_999);
        std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(secs, nanos))
    }

    /// The bytes of the regular file `name` here, at most `cap` of them:
    /// no link, no FIFO or device (refused before a byte is read, and
    /// without waiting), nothing past the cap.
    pub fn read(&self, name: &str, cap: u64) -> Result<Vec<u8>, FileError> {
        read_opened(self.open_to_read(name)?, cap)
    }

    /// [`Folder::read`] of a file this user or the folder's owner put
    /// here: another user's is refused before a byte is read.
    pub fn read_own(&self, name: &str, cap: u64) -> Result<Vec<u8>, FileError> {
        let file = self.open_to_read(name)?;
        let st = rustix::fs::fstat(&file).map_err(|e| FileError::Io(e.into()))?;
        self.check_owner(st.st_uid).map_err(FileError::Io)?;
        read_opened(file, cap)
    }

    /// The last `max` bytes of the regular file `name` here (all of it
    /// when it is no longer), and whether the file was longer (the tail
    /// then starts inside it): no link, FIFO or device, never more than
    /// `max` read.
    pub fn read_tail(&self, name: &str, max: u64) -> Result<Tail, FileError> {
        use std::io::{Read, Seek, SeekFrom};
        let (mut file, len) = self.open_regular(name)?;
        file.seek(SeekFrom::Start(len.saturating_sub(max)))
            .map_err(FileError::Io)?;
        let mut bytes = Vec::new();
        let read = file.take(max).read_to_end(&mut bytes);
        read.map(|_| Tail {
            bytes,
            cut: len > max,
        })
        .map_err(FileError::Io)
    }

    /// The device and inode of the regular file `name` here, looked at
    /// without opening it and without following a link.
    pub fn file_identity(&self, name: &str) -> Result<(u64, u64), FileError> {
        check_name(name.as_ref()).map_err(FileError::Io)?;
        let st = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| FileError::Io(e.into()))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Ok((st.st_dev, st.st_ino)),
            kind => Err(FileError::NotRegular(kind_of(kind))),
        }
    }

    /// The regular file `name` here opened to read, and its length.
    fn open_regular(&self, name: &str) -> Result<(File, u64), FileError> {
        let file = self.open_to_read(name)?;
        let st = rustix::fs::fstat(&file).map_err(|e| FileError::Io(e.into()))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => Ok((file, u64::try_from(st.st_size).unwrap_or(0))),
            kind => Err(FileError::NotRegular(kind_of(kind))),
        }
    }

    /// `name` here opened to read: never through a link, never waiting.
    fn open_to_read(&self, name: &str) -> Result<File, FileError> {
        check_name(name.as_ref()).map_err(FileError::Io)?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => Ok(File::from(fd)),
            Err(Errno::LOOP) => Err(FileError::NotRegular("a symbolic link")),
            Err(e) => Err(FileError::Io(e.into())),
        }
    }

    /// Writes `name` here whole: a new temporary file (O_EXCL | O_NOFOLLOW,
    /// an unpredictable name, `mode` whatever the umask), then a rename over
    /// the name, both inside this folder. A link at the name is replaced,
    /// never followed.
    pub fn replace(&self, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
        check_name(name.as_ref())?;
        let (tmp, file) = self.temp_file(&format!(".{name}"), mode)?;
        let mut file = file;
        let written = file.write_all(bytes).and_then(|()| {
            rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name).map_err(io::Error::from)
        });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
        }
        written
    }

    /// Writes a new file `name` here, whole: under an exclusive temporary
    /// name first, flushed to disk, then renamed into place — never over
    /// anything there (`AlreadyExists`, and the temporary file is gone), so
    /// whoever watches the folder never sees half a file.
    pub fn place(&self, name: &OsStr, bytes: &[u8], mode: u32) -> io::Result<()> {
        check_name(name)?;
        let (tmp, mut file) = self.temp_file(".agent-harness-place", mode)?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_data())
            .and_then(|()| {
                rustix::fs::renameat_with(
                    &self.fd,
                    tmp.as_str(),
                    &self.fd,
                    name,
                    RenameFlags::NOREPLACE,
                )
                .map_err(io::Error::from)
            });
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
        }
        written
    }

    /// Removes the file (or link, as a link) `name` here; nothing there is
    /// no error.
    pub fn remove_file(&self, name: &OsStr) -> io::Result<()> {
        check_name(name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Moves `from` here to `to` in `into`, never over anything there
    /// (`AlreadyExists`): a rename, or across file systems a copy under an
    /// exclusive temporary name in `into`, flushed, renamed into place, and
    /// then the original removed. The source is never followed: a link
    /// moves as the link, and a copied file is read from a descriptor
    /// opened without following links (a link swapped in meanwhile is
    /// refused); a FIFO or device arrives as an empty file, never read.
    pub fn move_to(&self, from: &OsStr, into: &Folder, to: &OsStr) -> io::Result<()> {
        check_name(from)?;
        check_name(to)?;
        match rustix::fs::renameat_with(&self.fd, from, &into.fd, to, RenameFlags::NOREPLACE) {
            Ok(()) => Ok(()),
            Err(Errno::XDEV) => self.copy_across(from, into, to),
            // A file system without RENAME_NOREPLACE (NFS): checked, then
            // renamed; the run lock keeps the harness's own moves apart.
            Err(Errno::INVAL) if into.has(to) => Err(Errno::EXIST.into()),
            Err(Errno::INVAL) => Ok(rustix::fs::renameat(&self.fd, from, &into.fd, to)?),
            Err(e) => Err(e.into()),
        }
    }

    /// [`Folder::move_to`] between two file systems.
    fn copy_across(&self, from: &OsStr, into: &Folder, to: &OsStr) -> io::Result<()> {
        let seen = rustix::fs::statat(&self.fd, from, AtFlags::SYMLINK_NOFOLLOW)?;
        let tmp = match FileType::from_raw_mode(seen.st_mode) {
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(&self.fd, from, Vec::new())?;
                into.temp_link(&target)?
            }
            FileType::RegularFile => {
                let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
                let source = rustix::fs::openat(&self.fd, from, flags, Mode::empty())?;
                let st = rustix::fs::fstat(&source)?;
                if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino)
                    || FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
                {
                    return Err(io::Error::other("it was replaced while it was moved"));
                }
                let (tmp, mut file) = into.temp_file(".agent-harness-move", st.st_mode & 0o777)?;
                let copied =
                    io::copy(&mut File::from(source), &mut file).and_then(|_| file.sync_data());
                if let Err(e) = copied {
                    let _ = rustix::fs::unlinkat(&into.fd, tmp.as_str(), AtFlags::empty());
                    return Err(e);
                }
                tmp
            }
            _ => into.temp_file(".agent-harness-move", 0o600)?.0,
        };
        if let Err(e) =
            rustix::fs::renameat_with(&into.fd, tmp.as_str(), &into.fd, to, RenameFlags::NOREPLACE)
        {
            let _ = rustix::fs::unlinkat(&into.fd, tmp.as_str(), AtFlags::empty());
            return Err(e.into());
        }
        self.remove_file(from)
    }

    /// A new file here under an unpredictable name starting with `prefix`:
    /// created exclusively, never through a link, `mode` whatever the umask.
    fn temp_file(&self, prefix: &str, mode: u32) -> io::Result<(String, File)> {
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(mode);
        let (tmp, fd) = exclusively(prefix, |tmp| rustix::fs::openat(&self.fd, tmp, flags, mode))?;
        if let Err(e) = rustix::fs::fchmod(&fd, mode) {
            let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
            return Err(e.into());
        }
        Ok((tmp, File::from(fd)))
    }

    /// A new link to `target` here under an unpredictable name.
    fn temp_link(&self, target: &std::ffi::CStr) -> io::Result<String> {
        let (tmp, ()) = exclusively(".agent-harness-move", |tmp| {
            rustix::fs::symlinkat(target, &self.fd, tmp)
        })?;
        Ok(tmp)
    }

    /// Removes `name` here and, when it is a real folder, everything in
    /// it, each step through an opened folder: a link is removed as a
    /// link, never followed, whatever is renamed meanwhile. The walk is a
    /// loop, not a recursion: a folder deeper than [`MAX_TREE_DEPTH`] below
    /// `name` is left (with what holds it) and the error says so.
    pub fn remove_tree(&self, name: &str) -> io::Result<()> {
        check_name(name.as_ref())?;
        let top = match rustix::fs::openat(&self.fd, name, Self::DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Folder { fd },
            Err(Errno::NOTDIR | Errno::LOOP) => {
                return Ok(rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())?);
            }
            Err(e) => return Err(e.into()),
        };
        // Each level: the opened folder, its name in the level above, and
        // the sub-folders still to empty.
        let mut levels = vec![(top.emptied_of_files()?, OsString::from(name))];
        loop {
            let depth = levels.len();
            let Some(((folder, pending), _)) = levels.last_mut() else {
                break;
            };
            if let Some(next) = pending.pop() {
                if depth > MAX_TREE_DEPTH {
                    return Err(io::Error::other(format!(
                        "it is more than {MAX_TREE_DEPTH} folders deep; what lies deeper was left as it is"
                    )));
                }
                let sub =
                    match rustix::fs::openat(&folder.fd, &next, Self::DIR_FLAGS, Mode::empty()) {
                        Ok(fd) => Folder { fd },
                        // Swapped for a file or a link meanwhile: removed as one.
                        Err(Errno::NOTDIR | Errno::LOOP) => {
                            folder.remove_file(&next)?;
                            continue;
                        }
                        Err(Errno::NOENT) => continue,
                        Err(e) => return Err(e.into()),
                    };
                levels.push((sub.emptied_of_files()?, next));
                continue;
            }
            let Some((_, emptied)) = levels.pop() else {
                break;
            };
            let parent = levels.last().map_or(&self.fd, |((f, _), _)| &f.fd);
            rustix::fs::unlinkat(parent, &emptied, AtFlags::REMOVEDIR)?;
        }
        Ok(())
    }

    /// This folder with every name in it removed but its sub-folders,
    /// which are returned.
    fn emptied_of_files(self) -> io::Result<(Folder, Vec<OsString>)> {
        let mut folders = Vec::new();
        for entry in self.entries()? {
            match rustix::fs::unlinkat(&self.fd, &entry.name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(Errno::ISDIR | Errno::PERM) => folders.push(entry.name),
                Err(e) => return Err(e.into()),
            }
        }
        Ok((self, folders))
    }
}

/// Runs `create` with fresh unpredictable names (`prefix.PID-RANDOM.tmp`)
/// until one is free: a name planted in advance is never taken over.
fn exclusively<T>(
    prefix: &str,
    create: impl Fn(&str) -> rustix::io::Result<T>,
) -> io::Result<(String, T)> {
    for _ in 0..8 {
        let tmp = format!(
            "{prefix}.{}-{:016x}.tmp",
            std::process::id(),
            fastrand::u64(..)
        );
        match create(&tmp) {
            Ok(made) => return Ok((tmp, made)),
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other("no free temporary name"))
}

/// One path step: not empty, `.` or `..`, and without a separator.
fn check_name(name: &OsStr) -> io::Result<()> {
    let bytes = name.as_bytes();
    if bytes.is_empty()
        || bytes == b"."
        || bytes == b".."
        || bytes.contains(&b'/')
        || bytes.contains(&0)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a file name"),
        ));
    }
    Ok(())
}

fn not_regular(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("not a regular file ({what})"),
    )
}

fn kind_of(t: FileType) -> &'static str {
    match t {
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::BlockDevice | FileType::CharacterDevice => "a device",
        FileType::Directory => "a folder",
        _ => "not a plain file",
    }
}

#[cfg(test)]
mod tests;
