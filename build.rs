//! Links the binary with packed relative relocations (`DT_RELR`): the
//! loader reads a few KiB of them at start instead of 1.8 MB, and the
//! executable stays position-independent (docs/performance.md).
//!
//! Only where the binary can start: the linker (rust-lld, Rust's default on
//! this target) makes it require glibc's `GLIBC_ABI_DT_RELR`, which glibc
//! has from 2.36 on. So the flag is added when building for the machine
//! that builds (host = target) and its glibc is 2.36 or newer;
//! `AGENT_HARNESS_NO_RELR=1` leaves it out (a binary for an older glibc).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=AGENT_HARNESS_NO_RELR");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let native = var("TARGET") == var("HOST") && var("TARGET").ends_with("linux-gnu");
    if native && var("AGENT_HARNESS_NO_RELR").is_empty() && host_glibc_has_relr() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
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
