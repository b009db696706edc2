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
//! - A code layout, only when `AGENT_HARNESS_CODE_ORDER` names one: the
//!   functions a run uses laid out together, so the kernel maps fewer pages
//!   of code. `scripts/release` writes the list for the very binary it
//!   ships (its symbol names carry hashes of this compiler and these
//!   dependencies) and links it again with it; a plain `cargo build` reads
//!   no list. The linker must take `--symbol-ordering-file` (rust-lld does,
//!   GNU ld does not): a small program is linked with it first, and a
//!   linker that refuses it fails the build, naming why.

// Cargo reads a build script's directives from its stdout.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for var in [
        "AGENT_HARNESS_NO_RELR",
        "AGENT_HARNESS_CODE_ORDER",
        // What the probe's answer depends on: the linker and the flags.
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let order = var("AGENT_HARNESS_CODE_ORDER");
    if !order.is_empty() {
        // The list changing is a new link.
        println!("cargo:rerun-if-changed={order}");
        code_layout(&order);
    }
    let native = var("TARGET") == var("HOST") && var("TARGET").ends_with("linux-gnu");
    if native && var("AGENT_HARNESS_NO_RELR").is_empty() && host_glibc_has_relr() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Hands the linker the list at `order`, or fails the build saying why not.
fn code_layout(order: &str) {
    if !std::path::Path::new(order).is_file() {
        panic!("AGENT_HARNESS_CODE_ORDER={order}: no such file");
    }
    // `-Xlinker` pairs: a comma in the path stays in the path. A name the
    // binary lacks is skipped by the linker: scripts/release checks every
    // name against the binary it linked.
    let args = [
        "-Xlinker".to_string(),
        format!("--symbol-ordering-file={order}"),
        "-Xlinker".to_string(),
        "--no-warn-symbol-ordering".to_string(),
    ];
    if let Err(why) = links_with(&args) {
        panic!(
            "AGENT_HARNESS_CODE_ORDER={order}: a small program linked with \
             --symbol-ordering-file failed ({why}): this linker takes no code layout"
        );
    }
    for arg in args {
        println!("cargo:rustc-link-arg-bins={arg}");
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
