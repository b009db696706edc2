//! `[tls]` (docs/operating.md, "TLS"): the certificates every connection
//! trusts beside the bundled roots — a private CA's, read from `ca_file`
//! when the config is loaded and checked there, so `check` says what is
//! wrong with the file before a connection meets it; with the key unset,
//! nothing is read. The file must be the operator's: one another user owns
//! or may write (or in a folder anyone may change) is refused.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use harness_base::file::{FileError, Links, read_regular};
use harness_base::http::{MAX_TRUST_BYTES, Trust};
use harness_base::owner::check_file;

use super::locate::expand_home;
use super::value::resolve_file;

/// `[tls]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    /// A PEM file of one or more certificates (a private CA) trusted
    /// beside the bundled roots.
    pub(super) ca_file: Option<PathBuf>,
}

/// `[tls]`, resolved.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsConfig {
    /// `[tls] ca_file`, made absolute; `None` when unset.
    pub ca_file: Option<PathBuf>,
    /// What the harness's connections trust: the bundled roots, and
    /// `ca_file`'s certificates beside them. Webfetch is given it only with
    /// `[tools.webfetch] use_ca_file`.
    pub trust: Trust,
}

/// `[tls]`: the file read, whole and at most [`MAX_TRUST_BYTES`], and each
/// certificate in it parsed; every refusal names the key and the path read.
pub(super) fn resolve_tls(
    raw: RawTls,
    base: &Path,
    home: Option<&Path>,
) -> Result<TlsConfig, String> {
    let Some(written) = raw.ca_file else {
        return Ok(TlsConfig::default());
    };
    if written.as_os_str().is_empty() {
        return Err(
            "[tls] ca_file is empty: name the PEM file of the CA's certificate, or leave the key out"
                .into(),
        );
    }
    let path = resolve_file(base, &expand_home(&written, home, "[tls] ca_file")?);
    let refused = |why: String| format!("[tls] ca_file {}: {why}", path.display());
    // What every connection trusts is the operator's alone to change.
    if let Err(why) = check_file(&path) {
        return Err(match std::fs::metadata(&path) {
            Err(e) => refused(format!("cannot read it ({e})")),
            Ok(_) => refused(format!(
                "not trusted: {why}; make it yours alone (chown, chmod go-w)"
            )),
        });
    }
    let pem = read_regular(&path, MAX_TRUST_BYTES, Links::Follow).map_err(|e| match e {
        FileError::Io(e) => refused(format!("cannot read it ({e})")),
        e => refused(e.to_string()),
    })?;
    let trust = Trust::with_pem(&pem).map_err(|e| refused(e.to_string()))?;
    Ok(TlsConfig {
        ca_file: Some(path),
        trust,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real certificate (the TLS tests' self-signed one for 127.0.0.1).
    const CERTIFICATE: &[u8] = include_bytes!("../../../tests/fixtures/tls/self-signed.pem");
    /// Its key: a PEM block that is no certificate.
    const KEY: &[u8] = include_bytes!("../../../tests/fixtures/tls/self-signed.key");

    /// `[tls] ca_file = "ca.pem"` resolved in a folder holding `ca.pem`
    /// with `bytes` (none when `None`).
    fn with_file(bytes: Option<&[u8]>) -> (tempfile::TempDir, Result<TlsConfig, String>) {
        let dir = tempfile::tempdir().unwrap();
        if let Some(bytes) = bytes {
            std::fs::write(dir.path().join("ca.pem"), bytes).unwrap();
        }
        let raw = RawTls {
            ca_file: Some("ca.pem".into()),
        };
        let resolved = resolve_tls(raw, dir.path(), None);
        (dir, resolved)
    }

    /// The refusal of a `ca.pem` holding `bytes`, checked to name the key
    /// and the path it resolved to.
    fn refusal(bytes: Option<&[u8]>) -> String {
        let (dir, resolved) = with_file(bytes);
        let e = resolved.unwrap_err();
        let prefix = format!("[tls] ca_file {}: ", dir.path().join("ca.pem").display());
        assert!(e.starts_with(&prefix), "{e}");
        e[prefix.len()..].to_string()
    }

    #[test]
    fn unset_reads_nothing_and_trusts_the_bundled_roots_alone() {
        let tls = resolve_tls(RawTls::default(), Path::new("/nonexistent"), None).unwrap();
        assert_eq!(tls.ca_file, None);
        assert_eq!(tls.trust, Trust::bundled());
        assert!(tls.trust.added().is_empty());
    }

    #[test]
    fn a_pem_file_relative_to_the_config_adds_each_certificate() {
        let two = [CERTIFICATE, CERTIFICATE].concat();
        let (dir, resolved) = with_file(Some(&two));
        let tls = resolved.unwrap();
        assert_eq!(tls.ca_file, Some(dir.path().join("ca.pem")));
        assert_eq!(tls.trust.added().len(), 2);
        assert_ne!(tls.trust, Trust::bundled());
    }

    #[test]
    fn a_file_holding_a_private_key_beside_the_certificate_is_refused() {
        let both = [CERTIFICATE, KEY, CERTIFICATE].concat();
        assert!(
            refusal(Some(&both)).starts_with("it holds a private key beside the certificate(s)"),
            "{}",
            refusal(Some(&both))
        );
    }

    #[test]
    fn a_missing_file_is_refused() {
        assert!(
            refusal(None).starts_with("cannot read it (No such file or directory"),
            "{}",
            refusal(None)
        );
    }

    #[test]
    fn an_empty_file_is_refused() {
        assert_eq!(refusal(Some(b"")), "it is empty");
        assert_eq!(refusal(Some(b" \n\n")), "it is empty");
    }

    #[test]
    fn a_file_that_is_not_pem_is_refused() {
        let e = refusal(Some(b"\x30\x82\x01\x0a not a PEM file"));
        assert!(
            e.starts_with("it is not PEM: no `-----BEGIN CERTIFICATE-----` block"),
            "{e}"
        );
        let e = refusal(Some(b"-----BEGIN CERTIFICATE-----\nMIIB\n"));
        assert!(
            e.starts_with("it is not valid PEM ("),
            "an unended block: {e}"
        );
    }

    #[test]
    fn a_file_without_a_certificate_block_is_refused() {
        assert_eq!(
            refusal(Some(KEY)),
            "it holds no CERTIFICATE block, only a private key: name the CA's certificate"
        );
    }

    #[test]
    fn a_certificate_that_does_not_parse_is_refused_by_its_number() {
        let garbage =
            b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
        let e = refusal(Some(&[CERTIFICATE, garbage.as_slice()].concat()));
        assert!(e.starts_with("its certificate 2 does not parse ("), "{e}");
    }

    #[test]
    fn a_file_past_the_cap_is_refused_unread() {
        let mut big = CERTIFICATE.to_vec();
        big.resize(usize::try_from(MAX_TRUST_BYTES).unwrap() + 1, b'\n');
        assert_eq!(
            refusal(Some(&big)),
            format!(
                "it is {} bytes; the limit is {MAX_TRUST_BYTES}",
                MAX_TRUST_BYTES + 1
            )
        );
    }

    #[test]
    fn a_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let raw = RawTls {
            ca_file: Some(dir.path().to_path_buf()),
        };
        let e = resolve_tls(raw, Path::new("/"), None).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let e = resolve_tls(
            RawTls {
                ca_file: Some("".into()),
            },
            dir.path(),
            None,
        )
        .unwrap_err();
        assert!(e.starts_with("[tls] ca_file is empty"), "{e}");
    }

    #[test]
    fn a_file_others_may_write_is_refused_at_the_file_a_link_points_to() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("shared.pem");
        std::fs::write(&pem, CERTIFICATE).unwrap();
        std::fs::set_permissions(&pem, std::fs::Permissions::from_mode(0o666)).unwrap();
        std::os::unix::fs::symlink(&pem, dir.path().join("ca.pem")).unwrap();
        let resolve = || {
            resolve_tls(
                RawTls {
                    ca_file: Some("ca.pem".into()),
                },
                dir.path(),
                None,
            )
        };
        let e = resolve().unwrap_err();
        assert_eq!(
            e,
            format!(
                "[tls] ca_file {}: not trusted: anyone may write it (mode 0666); make it yours alone (chown, chmod go-w)",
                dir.path().join("ca.pem").display()
            )
        );
        std::fs::set_permissions(&pem, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(resolve().unwrap().trust.added().len(), 1);
    }
}
