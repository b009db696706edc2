//! Which config file is read (docs/configuration.md): `--config`, then
//! `AGENT_HARNESS_CONFIG`, then `./agent.toml`, then
//! `$XDG_CONFIG_HOME/agent-harness/agent.toml` (`~/.config/…` when that is
//! unset, empty or relative), then `/etc/agent-harness/agent.toml`; the first that
//! exists. A file named by the flag or the variable is read even when it
//! does not exist (the error names it): a name given is never passed over.
//! A file found (not named) must be the operator's: one another user could
//! have put there or changed is refused, not read and not passed over
//! (docs/untrusted-input.md, "The folder it is started in"). And `~/` at
//! the start of a path value: the user's home.
//!
//! Pure: the flag, the environment, the current folder, the home folder and
//! whether a file exists are passed in, so every step is tested without
//! touching the process.

use std::path::{Path, PathBuf};

use super::{ConfigError, DEFAULT_CONFIG_FILE};

/// The variable naming the config file when `--config` is not given.
pub const CONFIG_VARIABLE: &str = "AGENT_HARNESS_CONFIG";

/// The system-wide config, the last place looked.
pub const SYSTEM_CONFIG: &str = "/etc/agent-harness/agent.toml";

/// What the lookup is given.
pub struct Lookup<'a> {
    /// `--config PATH`, when given.
    pub flag: Option<&'a Path>,
    /// The process environment (`AGENT_HARNESS_CONFIG`, `XDG_CONFIG_HOME`).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// The current folder.
    pub cwd: &'a Path,
    /// The user's home folder (`HOME`), when known.
    pub home: Option<&'a Path>,
    /// Whether a file is there.
    pub exists: &'a dyn Fn(&Path) -> bool,
    /// Why a file found is not the operator's to read, or `Ok`
    /// (`harness_base::owner::check_file` on disk).
    pub judge: &'a dyn Fn(&Path) -> Result<(), String>,
}

/// Every place looked, in order, after the flag and the variable: the
/// current folder's `agent.toml` (as written, relative), the user's and the
/// system's.
pub fn places(lookup: &Lookup<'_>) -> Vec<PathBuf> {
    // A relative XDG_CONFIG_HOME is ignored, as the XDG spec says.
    let xdg = (lookup.env)("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|v| v.is_absolute())
        .or_else(|| lookup.home.map(|h| h.join(".config")));
    let mut places = vec![PathBuf::from(DEFAULT_CONFIG_FILE)];
    places.extend(xdg.map(|x| x.join("agent-harness").join(DEFAULT_CONFIG_FILE)));
    places.push(PathBuf::from(SYSTEM_CONFIG));
    places
}

/// The config file to read. A relative `--config` or variable is kept as
/// written (it is read from the current folder); so is `agent.toml` found
/// in the current folder. A `~/` the shell did not expand (quoted, or in a
/// unit file) is the home folder, as in path values.
pub fn locate(lookup: &Lookup<'_>) -> Result<PathBuf, ConfigError> {
    let named = |path: &Path, key: &str| {
        expand_home(path, lookup.home, key).map_err(|message| ConfigError {
            path: path.display().to_string(),
            message,
        })
    };
    if let Some(flag) = lookup.flag {
        return named(flag, "--config");
    }
    if let Some(value) = (lookup.env)(CONFIG_VARIABLE).filter(|v| !v.is_empty()) {
        return named(Path::new(&value), CONFIG_VARIABLE);
    }
    let places = places(lookup);
    let within = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            lookup.cwd.join(p)
        }
    };
    if let Some(found) = places.iter().find(|p| (lookup.exists)(&within(p))) {
        return match (lookup.judge)(&within(found)) {
            Ok(()) => Ok(found.clone()),
            Err(why) => Err(ConfigError {
                path: within(found).display().to_string(),
                message: format!(
                    "not read: {why}. A config found by the lookup must be yours alone; fix its owner or mode, or name the config to read with --config PATH"
                ),
            }),
        };
    }
    let looked: Vec<String> = std::iter::once("--config PATH (not given)".to_string())
        .chain(std::iter::once(format!("{CONFIG_VARIABLE} (not set)")))
        .chain(places.iter().map(|p| within(p).display().to_string()))
        .collect();
    Err(ConfigError {
        path: DEFAULT_CONFIG_FILE.to_string(),
        message: format!(
            "no config file found; looked, in order, at: {}. Make one with `agent-harness init --openai URL` (or `--runpod ENDPOINT_ID`) in this folder, or name one with --config PATH",
            looked.join(", ")
        ),
    })
}

/// `value` with a leading `~/` made the home folder; `~user/` and a `~`
/// anywhere else are left as written. `Err` when it starts with `~/` and
/// there is no home to put there: `key` names the setting.
pub fn expand_home(value: &Path, home: Option<&Path>, key: &str) -> Result<PathBuf, String> {
    let Some(text) = value.to_str() else {
        return Ok(value.to_path_buf());
    };
    match text.strip_prefix("~/") {
        None if text == "~" => home
            .map(Path::to_path_buf)
            .ok_or_else(|| no_home(key, text)),
        None => Ok(value.to_path_buf()),
        Some(rest) => home.map(|h| h.join(rest)).ok_or_else(|| no_home(key, text)),
    }
}

fn no_home(key: &str, text: &str) -> String {
    format!("{key}: {text:?} starts with `~`, but HOME is not set: write the path in full")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_with(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn find(
        flag: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
        present: &[&str],
    ) -> Result<PathBuf, ConfigError> {
        let present: Vec<PathBuf> = present.iter().map(PathBuf::from).collect();
        let exists = |p: &Path| present.iter().any(|q| q == p);
        let flag = flag.map(PathBuf::from);
        locate(&Lookup {
            flag: flag.as_deref(),
            env,
            cwd: Path::new("/work/here"),
            home: Some(Path::new("/home/ann")),
            exists: &exists,
            judge: &|_| Ok(()),
        })
    }

    const ALL: &[&str] = &[
        "/work/here/agent.toml",
        "/xdg/agent-harness/agent.toml",
        "/home/ann/.config/agent-harness/agent.toml",
        "/etc/agent-harness/agent.toml",
    ];

    #[test]
    fn the_flag_comes_first_even_when_its_file_is_missing() {
        let env = env_with(&[(CONFIG_VARIABLE, "/from/env.toml")]);
        let got = find(Some("/missing/given.toml"), &env, ALL).unwrap();
        assert_eq!(got, PathBuf::from("/missing/given.toml"));
    }

    #[test]
    fn a_tilde_the_shell_left_in_the_flag_or_the_variable_is_the_home_folder() {
        let none = env_with(&[]);
        assert_eq!(
            find(Some("~/x/agent.toml"), &none, ALL).unwrap(),
            PathBuf::from("/home/ann/x/agent.toml")
        );
        let env = env_with(&[(CONFIG_VARIABLE, "~/y.toml")]);
        assert_eq!(
            find(None, &env, ALL).unwrap(),
            PathBuf::from("/home/ann/y.toml")
        );
        // `~user/` and a `~` inside stay as written.
        assert_eq!(
            find(Some("~bob/a.toml"), &none, ALL).unwrap(),
            PathBuf::from("~bob/a.toml")
        );
        // Without a home, the flag's `~/` is an error that names it.
        let err = locate(&Lookup {
            flag: Some(Path::new("~/x.toml")),
            env: &none,
            cwd: Path::new("/w"),
            home: None,
            exists: &|_| true,
            judge: &|_| Ok(()),
        })
        .unwrap_err();
        assert_eq!(err.path, "~/x.toml");
        assert!(
            err.message
                .starts_with("--config: \"~/x.toml\" starts with `~`, but HOME is not set"),
            "{}",
            err.message
        );
    }

    #[test]
    fn a_found_file_that_is_not_the_operators_is_refused_and_a_named_one_is_read() {
        let env = env_with(&[]);
        let planted = |p: &Path| match p == Path::new("/work/here/agent.toml") {
            true => Err("it is owned by mallory (uid 1001), not by root (you)".to_string()),
            false => Ok(()),
        };
        let lookup = |flag: Option<&'static str>| {
            locate(&Lookup {
                flag: flag.map(Path::new),
                env: &env,
                cwd: Path::new("/work/here"),
                home: Some(Path::new("/home/ann")),
                exists: &|_| true,
                judge: &planted,
            })
        };
        let e = lookup(None).unwrap_err();
        assert_eq!(
            e.path, "/work/here/agent.toml",
            "not passed over for the next"
        );
        assert!(
            e.message
                .starts_with("not read: it is owned by mallory (uid 1001)")
                && e.message
                    .ends_with("or name the config to read with --config PATH"),
            "{}",
            e.message
        );
        // Named, it is the operator's choice.
        assert_eq!(
            lookup(Some("agent.toml")).unwrap(),
            PathBuf::from("agent.toml")
        );
    }

    #[test]
    fn the_variable_comes_second_even_when_its_file_is_missing() {
        let env = env_with(&[(CONFIG_VARIABLE, "/from/env.toml")]);
        assert_eq!(
            find(None, &env, ALL).unwrap(),
            PathBuf::from("/from/env.toml")
        );
        let empty = env_with(&[(CONFIG_VARIABLE, "")]);
        assert_eq!(
            find(None, &empty, ALL).unwrap(),
            PathBuf::from("agent.toml"),
            "an empty variable is no name"
        );
    }

    #[test]
    fn then_the_current_folder_then_the_users_then_the_systems() {
        let xdg = env_with(&[("XDG_CONFIG_HOME", "/xdg")]);
        assert_eq!(find(None, &xdg, ALL).unwrap(), PathBuf::from("agent.toml"));
        assert_eq!(
            find(None, &xdg, &ALL[1..]).unwrap(),
            PathBuf::from("/xdg/agent-harness/agent.toml")
        );
        // XDG_CONFIG_HOME set: ~/.config is not looked at.
        assert_eq!(
            find(None, &xdg, &ALL[2..]).unwrap(),
            PathBuf::from("/etc/agent-harness/agent.toml")
        );
        // Unset, empty or relative (which the XDG spec says to ignore).
        for unset in [
            env_with(&[]),
            env_with(&[("XDG_CONFIG_HOME", "")]),
            env_with(&[("XDG_CONFIG_HOME", "rel/xdg")]),
        ] {
            assert_eq!(
                find(None, &unset, &ALL[2..]).unwrap(),
                PathBuf::from("/home/ann/.config/agent-harness/agent.toml")
            );
            assert_eq!(
                find(None, &unset, &ALL[3..]).unwrap(),
                PathBuf::from("/etc/agent-harness/agent.toml")
            );
        }
    }

    #[test]
    fn none_found_lists_every_place_in_order_and_says_how_to_make_one() {
        let e = find(None, &env_with(&[]), &[]).unwrap_err().to_string();
        let order = [
            "--config PATH",
            CONFIG_VARIABLE,
            "/work/here/agent.toml",
            "/home/ann/.config/agent-harness/agent.toml",
            "/etc/agent-harness/agent.toml",
            "agent-harness init",
        ];
        let at: Vec<usize> = order
            .iter()
            .map(|s| e.find(s).unwrap_or_else(|| panic!("{s} missing: {e}")))
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{e}");
    }

    #[test]
    fn a_leading_tilde_slash_is_the_home_folder_and_nothing_else_is() {
        let home = Some(Path::new("/home/ann"));
        let k = "[paths] inbox";
        let e = |p: &str| expand_home(Path::new(p), home, k).unwrap();
        assert_eq!(
            e("~/agent/tasks/inbox"),
            PathBuf::from("/home/ann/agent/tasks/inbox")
        );
        assert_eq!(e("~bob/tasks"), PathBuf::from("~bob/tasks"));
        assert_eq!(e("tasks/~/inbox"), PathBuf::from("tasks/~/inbox"));
        assert_eq!(e("/srv/~/x"), PathBuf::from("/srv/~/x"));
        let err = expand_home(Path::new("~/agent"), None, k).unwrap_err();
        assert!(
            err.starts_with("[paths] inbox: ") && err.contains("HOME"),
            "{err}"
        );
    }
}
