//! Two link options for the binary, each only where it works
//! (docs/performance.md, "What start-up costs"):
//!
//! - Packed relative relocations (`DT_RELR`): the loader reads a few KiB of
//!   them at start instead of 1.8 MB, and the executable stays
//!   position-independent. The linker (rust-lld, Rust's default on this
//!   target) then requires glibc's `GLIBC_ABI_DT_RELR`, which glibc has from
//!   2.36 on; so the option is added when building for the machine that
//!   builds (host = target) and its glibc is 2.36 or newer.
//!   `AGENT_HARNESS_NO_RELR=1` leaves it out (a binary for an older glibc).
//! - The code layout of `link/code-order.txt` (written by
//!   `scripts/code-order`): the functions a run uses laid out together, so
//!   the kernel maps fewer pages of code. Only for x86-64 (the names are
//!   that target's) and when the linker takes `--symbol-ordering-file`
//!   (rust-lld does, GNU ld does not): a small program is linked with it
//!   first, by the linker and flags this build uses.
//!   `AGENT_HARNESS_NO_CODE_ORDER=1` leaves it out.

use std::path::{Path, PathBuf};
use std::process::Command;

const ORDER: &str = "link/code-order.txt";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // The folder: the list appearing is a change too.
    println!("cargo:rerun-if-changed=link");
    for var in [
        "AGENT_HARNESS_NO_RELR",
        "AGENT_HARNESS_NO_CODE_ORDER",
        // What the probe's answer depends on: the linker and the flags.
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let native = var("TARGET") == var("HOST") && var("TARGET").ends_with("linux-gnu");
    if !native {
        return;
    }
    if var("AGENT_HARNESS_NO_RELR").is_empty() && host_glibc_has_relr() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    let order = Path::new(&var("CARGO_MANIFEST_DIR")).join(ORDER);
    let x86_64 = var("TARGET") == "x86_64-unknown-linux-gnu";
    if x86_64 && var("AGENT_HARNESS_NO_CODE_ORDER").is_empty() && order.is_file() {
        // `-Xlinker` pairs: a comma in the path stays in the path.
        let args = [
            "-Xlinker".to_string(),
            format!("--symbol-ordering-file={}", order.display()),
            // A name the binary no longer has is skipped, not an error.
            "-Xlinker".to_string(),
            "--no-warn-symbol-ordering".to_string(),
        ];
        match links_with(&args) {
            Ok(()) => {
                for arg in args {
                    println!("cargo:rustc-link-arg-bins={arg}");
                }
            }
            Err(why) => println!(
                "cargo:warning=linked without the code layout of {ORDER} \
                 (AGENT_HARNESS_NO_CODE_ORDER=1 silences this): a small program \
                 linked with --symbol-ordering-file failed: {why}"
            ),
        }
    }
}

/// `getconf GNU_LIBC_VERSION` says `glibc 2.36` or newer.
fn host_glibc_has_relr() -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 36)
}

/// Whether rustc, with this build's flags and linker, links a small
/// program given `args` for the linker; if not, what went wrong.
fn links_with(args: &[String]) -> Result<(), String> {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let out = PathBuf::from(var("OUT_DIR"));
    let source = out.join("probe.rs");
    std::fs::write(&source, "fn main() {}\n").map_err(|e| e.to_string())?;
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let mut probe = Command::new(rustc);
    probe
        .args(flags.split('\x1f').filter(|f| !f.is_empty()))
        .args([
            "--cap-lints",
            "allow",
            "--edition",
            "2021",
            "--crate-type",
            "bin",
        ])
        .args(["--target", &var("TARGET")])
        .arg("-o")
        .arg(out.join("probe"))
        .arg(&source);
    // A linker set in cargo's config or environment, as cargo will use it.
    if let Ok(linker) = std::env::var("RUSTC_LINKER") {
        probe.arg("-C").arg(format!("linker={linker}"));
    }
    for arg in args {
        probe.arg("-C").arg(format!("link-arg={arg}"));
    }
    let done = probe.output().map_err(|e| e.to_string())?;
    if done.status.success() {
        return Ok(());
    }
    // The linker's own complaint ("unrecognized option …") over rustc's
    // summary of it.
    let said = String::from_utf8_lossy(&done.stderr);
    let lines = || {
        said.lines()
            .map(|l| l.trim().trim_start_matches("= note:").trim())
    };
    let why = lines()
        .find(|l| {
            ["unrecognized option", "unknown option", "unknown argument"]
                .iter()
                .any(|m| l.contains(m))
        })
        .or_else(|| lines().find(|l| l.starts_with("error")));
    Err(why.unwrap_or("no message").to_string())
}
