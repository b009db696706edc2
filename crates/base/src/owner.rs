//! Whose file it is: the names `/etc/passwd` and `/etc/group` give user
//! and group ids ([`Accounts`]), and the rule a file the harness trusts
//! without being told to must meet ([`check_file`]): this user
//! or root owns it, nobody else may write it, and nobody else may put
//! another file in its place (the folder is this user's or root's, and
//! others may write it only with the sticky bit).
//!
//! A group may write it only when the group is its owner's alone, as
//! Debian's OpenSSH judges a user-private group (the `umask 002` setups):
//! the owner is the group's one member, counting both the users whose
//! primary group it is and the group's listed members.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::file::{Links, read_regular};

/// The most read of `/etc/passwd` or `/etc/group`.
const MAX_ACCOUNTS_BYTES: u64 = 4 << 20;

/// Users and groups as the local account files list them (no NSS: a user
/// only a directory service knows is not listed, so a group holding one is
/// not judged private).
#[derive(Debug, Default, Clone)]
pub struct Accounts {
    /// (name, uid, primary gid) for each user.
    users: Vec<(String, u32, u32)>,
    /// (name, gid, listed members) for each group.
    groups: Vec<(String, u32, Vec<String>)>,
}

impl Accounts {
    /// This machine's `/etc/passwd` and `/etc/group`; one that cannot be
    /// read lists nobody.
    pub fn read() -> Accounts {
        let read = |path: &str| {
            read_regular(Path::new(path), MAX_ACCOUNTS_BYTES, Links::Follow)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default()
        };
        Accounts::parse(&read("/etc/passwd"), &read("/etc/group"))
    }

    /// Accounts from the text of a passwd and a group file; lines that are
    /// not such lines are passed over.
    pub fn parse(passwd: &str, group: &str) -> Accounts {
        let users = passwd
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split(':').collect();
                Some((
                    f.first()?.to_string(),
                    f.get(2)?.parse().ok()?,
                    f.get(3)?.parse().ok()?,
                ))
            })
            .collect();
        let groups = group
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split(':').collect();
                let members = f
                    .get(3)?
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect();
                Some((f.first()?.to_string(), f.get(2)?.parse().ok()?, members))
            })
            .collect();
        Accounts { users, groups }
    }

    /// The name of user `uid`.
    pub fn user(&self, uid: u32) -> Option<&str> {
        self.users
            .iter()
            .find(|(_, u, _)| *u == uid)
            .map(|(n, _, _)| n.as_str())
    }

    /// The name of group `gid`.
    pub fn group(&self, gid: u32) -> Option<&str> {
        self.groups
            .iter()
            .find(|(_, g, _)| *g == gid)
            .map(|(n, _, _)| n.as_str())
    }

    /// Whether group `gid` is user `uid`'s alone: listed, with `uid` as its
    /// one member whether by primary group or by the group's list.
    pub fn private_to(&self, gid: u32, uid: u32) -> bool {
        let Some((_, _, listed)) = self.groups.iter().find(|(_, g, _)| *g == gid) else {
            return false;
        };
        let Some(owner) = self.user(uid) else {
            return false;
        };
        let primary = self.users.iter().filter(|(_, _, g)| *g == gid);
        let mut members = 0;
        for (_, member, _) in primary {
            if *member != uid {
                return false;
            }
            members += 1;
        }
        for name in listed {
            if name != owner {
                return false;
            }
            members += 1;
        }
        members > 0
    }

    /// `uid` as a person reads it: `mallory (uid 1001)`, or the number.
    fn who(&self, uid: u32) -> String {
        match self.user(uid) {
            Some(name) => format!("{name} (uid {uid})"),
            None => format!("uid {uid}"),
        }
    }
}

/// The user this process runs as (its effective id).
pub fn me() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Who owns a file or folder and its mode, as `stat` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

impl Stat {
    fn of(meta: &std::fs::Metadata) -> Stat {
        Stat {
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode(),
        }
    }
}

/// Why a file is not this user's to trust, or `Ok`: owned by `me` or root;
/// not writable by others; writable by its group only when the group is
/// the owner's alone. The words say what, never the path: the caller names
/// it.
pub fn judge_file(file: Stat, me: u32, accounts: &Accounts) -> Result<(), String> {
    if file.uid != me && file.uid != 0 {
        let owner = accounts.who(file.uid);
        return Err(match me {
            0 => format!("it is owned by {owner}, not by root (you)"),
            _ => format!(
                "it is owned by {owner}, not by you, {}, or root",
                accounts.who(me)
            ),
        });
    }
    if file.mode & 0o002 != 0 {
        return Err(format!(
            "anyone may write it (mode {:04o})",
            file.mode & 0o7777
        ));
    }
    if file.mode & 0o020 != 0 && !accounts.private_to(file.gid, file.uid) {
        let group = match accounts.group(file.gid) {
            Some(name) => format!("group {name} (gid {})", file.gid),
            None => format!("gid {}", file.gid),
        };
        return Err(format!(
            "{group} may write it (mode {:04o}) and has members besides its owner",
            file.mode & 0o7777
        ));
    }
    Ok(())
}

/// Why a folder holding a trusted file is not fit to, or `Ok`: nobody but
/// `me` or root may put another file under the name — the folder is
/// theirs, and others (or a group with members besides its owner) may
/// write it only with the sticky bit, as in `/tmp`, where only a file's
/// owner may rename or remove it.
pub fn judge_folder(folder: Stat, me: u32, accounts: &Accounts) -> Result<(), String> {
    if folder.uid != me && folder.uid != 0 {
        return Err(format!(
            "the folder it is in is owned by {}, who may put another file in its place",
            accounts.who(folder.uid)
        ));
    }
    let sticky = folder.mode & 0o1000 != 0;
    if folder.mode & 0o002 != 0 && !sticky {
        return Err(format!(
            "anyone may change the folder it is in (mode {:04o}, no sticky bit)",
            folder.mode & 0o7777
        ));
    }
    if folder.mode & 0o020 != 0 && !sticky && !accounts.private_to(folder.gid, folder.uid) {
        return Err(format!(
            "a group with members besides its owner may change the folder it is in (mode {:04o}, no sticky bit)",
            folder.mode & 0o7777
        ));
    }
    Ok(())
}

/// [`judge_file`] and [`judge_folder`] on disk: the file a link at `path` points to, the folder
/// holding that file, and the folder holding the name `path` (where another
/// file could be put in its place). `Err` says what is wrong, naming the
/// folder when it is the folder. The account files are read only when a
/// group may write one of them or a refusal names an owner: a file and
/// folders of this user's or root's that no one else may write need none.
pub fn check_file(path: &Path) -> Result<(), String> {
    let me = me();
    let plainly_ours = |st: Stat, folder: bool| {
        let sticky = folder && st.mode & 0o1000 != 0;
        (st.uid == me || st.uid == 0) && (st.mode & 0o022 == 0 || sticky)
    };
    let file = std::fs::metadata(path).map_err(|e| format!("cannot stat it ({e})"))?;
    let target = std::fs::canonicalize(path).map_err(|e| format!("cannot resolve it ({e})"))?;
    let named = match path.parent() {
        Some(p) if p.as_os_str().is_empty() => Some(Path::new(".").to_path_buf()),
        p => p.map(Path::to_path_buf),
    };
    let mut folders: Vec<_> = [target.parent().map(Path::to_path_buf), named]
        .into_iter()
        .flatten()
        .collect();
    folders.dedup();
    let mut stats = Vec::with_capacity(folders.len());
    for folder in folders {
        let meta = std::fs::metadata(&folder).map_err(|e| {
            format!(
                "cannot stat the folder it is in ({e}): {}",
                folder.display()
            )
        })?;
        stats.push((folder, Stat::of(&meta)));
    }
    let file = Stat::of(&file);
    if plainly_ours(file, false) && stats.iter().all(|(_, st)| plainly_ours(*st, true)) {
        return Ok(());
    }
    let accounts = Accounts::read();
    judge_file(file, me, &accounts)?;
    for (folder, st) in stats {
        judge_folder(st, me, &accounts).map_err(|why| format!("{why}: {}", folder.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        ann:x:1000:1000:Ann:/home/ann:/bin/bash\n\
        bob:x:1001:100:Bob:/home/bob:/bin/bash\n\
        cy:x:1002:100:Cy:/home/cy:/bin/bash\n\
        dee:x:1003:1003:Dee:/home/dee:/bin/bash\n\
        garbage line\n";
    const GROUP: &str = "root:x:0:\n\
        ann:x:1000:\n\
        users:x:100:\n\
        dee:x:1003:ann\n\
        staff:x:50:ann\n\
        empty:x:60:\n";

    fn accounts() -> Accounts {
        Accounts::parse(PASSWD, GROUP)
    }

    fn stat(uid: u32, gid: u32, mode: u32) -> Stat {
        Stat { uid, gid, mode }
    }

    #[test]
    fn a_group_is_private_when_its_owner_is_its_one_member() {
        let a = accounts();
        assert!(a.private_to(1000, 1000), "ann's own group");
        assert!(!a.private_to(100, 1001), "users: bob and cy");
        assert!(!a.private_to(1003, 1003), "dee's group lists ann too");
        assert!(a.private_to(50, 1000), "staff lists ann alone");
        assert!(!a.private_to(50, 1001), "staff is not bob's");
        assert!(!a.private_to(60, 1000), "no member at all");
        assert!(!a.private_to(999, 1000), "a group not listed");
        assert_eq!(a.user(1001), Some("bob"));
        assert_eq!(a.group(100), Some("users"));
    }

    #[test]
    fn the_users_own_file_or_roots_is_trusted_and_nobody_elses() {
        let a = accounts();
        assert_eq!(judge_file(stat(1000, 1000, 0o100600), 1000, &a), Ok(()));
        assert_eq!(judge_file(stat(0, 0, 0o100644), 1000, &a), Ok(()));
        let e = judge_file(stat(1001, 100, 0o100644), 1000, &a).unwrap_err();
        assert_eq!(
            e,
            "it is owned by bob (uid 1001), not by you, ann (uid 1000), or root"
        );
        // Root is held to it too: another user's file is refused.
        let e = judge_file(stat(65534, 65534, 0o100600), 0, &a).unwrap_err();
        assert_eq!(e, "it is owned by uid 65534, not by root (you)");
    }

    #[test]
    fn writable_by_others_or_a_shared_group_is_refused_and_a_private_group_is_not() {
        let a = accounts();
        let e = judge_file(stat(1000, 1000, 0o100666), 1000, &a).unwrap_err();
        assert_eq!(e, "anyone may write it (mode 0666)");
        // umask 002 in a user-private group: kept working.
        assert_eq!(judge_file(stat(1000, 1000, 0o100664), 1000, &a), Ok(()));
        let e = judge_file(stat(1001, 100, 0o100664), 1001, &a).unwrap_err();
        assert_eq!(
            e,
            "group users (gid 100) may write it (mode 0664) and has members besides its owner"
        );
        let e = judge_file(stat(1000, 4242, 0o100660), 1000, &a).unwrap_err();
        assert!(e.starts_with("gid 4242 may write it"), "{e}");
    }

    #[test]
    fn a_folder_another_may_change_is_refused_unless_sticky() {
        let a = accounts();
        let e = judge_folder(stat(0, 0, 0o40777), 1000, &a).unwrap_err();
        assert_eq!(
            e,
            "anyone may change the folder it is in (mode 0777, no sticky bit)"
        );
        assert_eq!(judge_folder(stat(0, 0, 0o41777), 1000, &a), Ok(()), "/tmp");
        // A user-private group may write it; a shared one may not.
        assert_eq!(judge_folder(stat(1000, 1000, 0o40775), 1000, &a), Ok(()));
        let e = judge_folder(stat(1001, 100, 0o42775), 1001, &a).unwrap_err();
        assert!(
            e.starts_with("a group with members besides its owner"),
            "{e}"
        );
        // Another user's folder: they may swap the file.
        let e = judge_folder(stat(1001, 100, 0o40755), 1000, &a).unwrap_err();
        assert_eq!(
            e,
            "the folder it is in is owned by bob (uid 1001), who may put another file in its place"
        );
    }

    #[test]
    fn on_disk_the_folder_is_named_and_a_link_is_judged_at_its_target() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.toml");
        std::fs::write(&file, "").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(check_file(&file), Ok(()));

        let e = check_file(&dir.path().join("gone.toml")).unwrap_err();
        assert!(e.starts_with("cannot stat it ("), "{e}");

        // A link to a file anyone may write is that file.
        let shared = dir.path().join("shared.toml");
        std::fs::write(&shared, "").unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o666)).unwrap();
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&shared, &link).unwrap();
        assert_eq!(
            check_file(&link).unwrap_err(),
            "anyone may write it (mode 0666)"
        );

        // The folder holding the name, when anyone may change it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_file(&file).unwrap_err();
        assert_eq!(
            e,
            format!(
                "anyone may change the folder it is in (mode 0777, no sticky bit): {}",
                dir.path().display()
            )
        );
    }
}
