//! Who holds a `flock`, found without taking it: Linux lists every lock
//! granted in `/proc/locks`, with the process that took it and the device
//! and inode of its file. A reader that tried the lock instead (even its
//! shared side, for an instant) could make a process that wants it in that
//! instant find it taken.

use std::io::{self, Read};

/// `/proc/locks` is a line a lock; more than this is not read.
const MAX_LOCKS_BYTES: u64 = 16 << 20;

/// The first read of `/proc/locks`: more than the kernel gives in one read
/// (a page of lines).
const PAGE_READ: usize = 64 << 10;

/// An exclusive `flock` granted (not one waited for), as `/proc/locks`
/// lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Flock {
    /// The process that took it, as this process's pid namespace numbers
    /// it (a lock whose holder it cannot see is not listed at all).
    pid: u32,
    major: u32,
    minor: u32,
    inode: u64,
}

/// Looks at `/proc/locks` a holder is sought in at most. A table longer
/// than what the kernel gives in one read (a page of lines) is read in
/// pieces, and a line can slip between two of them as other locks come and
/// go: three looks make missing a lock held all along unlikely, not
/// impossible. A table read in one read is one look, and enough.
const LOOKS: usize = 3;

/// The process holding the exclusive `flock` on the file `dev`/`inode`
/// ([`holder`]), from up to [`LOOKS`] looks at `/proc/locks`; `Err` when
/// it cannot be read.
pub fn holder_now(dev: u64, inode: u64, noted: Option<u32>) -> io::Result<Option<u32>> {
    for _ in 1..LOOKS {
        let (flocks, whole) = exclusive_flocks()?;
        let found = holder(&flocks, dev, inode, noted);
        if found.is_some() || whole {
            return Ok(found);
        }
    }
    Ok(holder(&exclusive_flocks()?.0, dev, inode, noted))
}

/// The exclusive `flock`s granted now, from `/proc/locks`, and whether
/// the table was read in one read (one look at it); `Err` when it cannot
/// be read (not Linux, no `/proc`).
fn exclusive_flocks() -> io::Result<(Vec<Flock>, bool)> {
    let mut file = std::fs::File::open("/proc/locks")?;
    // One read is one look at the kernel's table: it holds the table still
    // while it fills a page of lines. A second read starts over at a line
    // number, so a lock taken or let go between two reads (another
    // process's) shifts the lines, and one still held could be skipped:
    // the table is read whole in one read when it fits in one.
    let mut bytes = vec![0; PAGE_READ];
    let n = file.read(&mut bytes)?;
    bytes.truncate(n);
    let more = file.take(MAX_LOCKS_BYTES).read_to_end(&mut bytes)?;
    Ok((parse(&String::from_utf8_lossy(&bytes)), more == 0))
}

/// The exclusive `flock`s of `/proc/locks`' text: lines such as
/// `3: FLOCK  ADVISORY  WRITE 4242 00:1a:1234 0 EOF` (the device's major
/// and minor numbers in hex); a waiter's line (`3: -> FLOCK …`), a shared
/// lock, a POSIX or OFD lock, a lease and anything unreadable are left out.
fn parse(text: &str) -> Vec<Flock> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [_, "FLOCK", _, "WRITE", pid, file, ..] = fields.as_slice() else {
                return None;
            };
            let mut parts = file.split(':');
            let (major, minor, inode) = (parts.next()?, parts.next()?, parts.next()?);
            Some(Flock {
                pid: pid.parse().ok().filter(|&p| p > 0)?,
                major: u32::from_str_radix(major, 16).ok()?,
                minor: u32::from_str_radix(minor, 16).ok()?,
                inode: inode.parse().ok()?,
            })
        })
        .collect()
}

/// The process holding an exclusive `flock` on the file at `dev`/`inode`
/// (as `stat` gives them), among `flocks`. Some file systems (btrfs, an
/// overlay) number a file's device in `stat` otherwise than in
/// `/proc/locks`: a lock on the same inode taken by `noted` (the process
/// the file's holder note names) is taken as it then.
fn holder(flocks: &[Flock], dev: u64, inode: u64, noted: Option<u32>) -> Option<u32> {
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let exact = flocks
        .iter()
        .find(|f| f.inode == inode && f.major == major && f.minor == minor);
    exact
        .or_else(|| {
            flocks
                .iter()
                .find(|f| f.inode == inode && Some(f.pid) == noted)
        })
        .map(|f| f.pid)
}

/// Whether process `pid` is alive (one of another user's counts).
pub fn alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_granted_exclusive_flocks_are_read() {
        let text = "\
1: POSIX  ADVISORY  WRITE 100 08:02:55 0 EOF
2: FLOCK  ADVISORY  WRITE 4242 00:1a:1234 0 EOF
2: -> FLOCK  ADVISORY  WRITE 4343 00:1a:1234 0 EOF
3: FLOCK  ADVISORY  READ 77 00:1a:99 0 EOF
4: OFDLCK ADVISORY  WRITE -1 08:02:56 0 EOF
5: FLOCK  ADVISORY  WRITE 12 103:fe:7 0 EOF
6: FLOCK  ADVISORY  WRITE x 00:1a:8 0 EOF
7: LEASE  ACTIVE    READ 13 00:1a:9 0 EOF
garbage";
        assert_eq!(
            parse(text),
            [
                Flock {
                    pid: 4242,
                    major: 0,
                    minor: 0x1a,
                    inode: 1234
                },
                Flock {
                    pid: 12,
                    major: 0x103,
                    minor: 0xfe,
                    inode: 7
                }
            ]
        );
    }

    #[test]
    fn the_holder_is_the_lock_on_the_files_device_and_inode() {
        let dev = rustix::fs::makedev(0, 0x1a);
        let locks = parse(
            "1: FLOCK  ADVISORY  WRITE 7 00:1b:1234 0 EOF\n2: FLOCK  ADVISORY  WRITE 8 00:1a:1234 0 EOF\n",
        );
        assert_eq!(holder(&locks, dev, 1234, None), Some(8));
        assert_eq!(holder(&locks, dev, 1235, Some(8)), None);
        // Another device number for the same inode: only the noted holder's.
        let other = rustix::fs::makedev(0, 0x2a);
        assert_eq!(holder(&locks, other, 1234, None), None);
        assert_eq!(holder(&locks, other, 1234, Some(7)), Some(7));
    }

    #[test]
    fn this_process_is_alive_and_a_lock_it_holds_is_listed() {
        assert!(alive(std::process::id()));
        assert!(!alive(0));
        assert!(!alive(u32::MAX));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let file = std::fs::File::create(&path).unwrap();
        let st = rustix::fs::stat(&path).unwrap();
        let Ok((before, _)) = exclusive_flocks() else {
            return; // no /proc here
        };
        assert_eq!(holder(&before, st.st_dev, st.st_ino, None), None);
        file.lock().unwrap();
        let (held, _) = exclusive_flocks().unwrap();
        assert_eq!(
            holder(&held, st.st_dev, st.st_ino, Some(std::process::id())),
            Some(std::process::id())
        );
    }
}
