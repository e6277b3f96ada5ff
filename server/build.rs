//! Release builds for Linux link with `hot-text.ld`, which puts the
//! functions a start and a first request run together at the front of the
//! code: an idle server then maps 3 MiB of code where it mapped 8
//! (scripts/hot-text; docs/benchmarks.md, "Idle footprint"). GNU ld, lld and
//! zig's linker read it. Debug builds leave it out: lld matches its 3,000
//! patterns against a debug build's sections in 53 s. `RKLLM_HOT_TEXT=0`
//! leaves it out too, for a linker that takes no such script (mold, gold)
//! and for the build `scripts/hot-text profile` profiles.
//!
//! Its patterns name v0-mangled symbols (.cargo/config.toml). Flags given in
//! `RUSTFLAGS` replace that file's, so a build whose flags lack the v0
//! mangling would match nothing: it leaves the script out, with a warning.

use std::env;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=hot-text.ld");
    println!("cargo:rerun-if-env-changed=RKLLM_HOT_TEXT");
    let release = env::var("PROFILE").is_ok_and(|p| p == "release");
    let linux = env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let wanted = env::var("RKLLM_HOT_TEXT").as_deref() != Ok("0");
    if !(release && linux && wanted) {
        return;
    }
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if !flags.contains("symbol-mangling-version=v0") {
        println!(
            "cargo:warning=the functions a start runs are not laid out together \
             (server/hot-text.ld): the build's flags replace .cargo/config.toml's \
             -C symbol-mangling-version=v0; add it to RUSTFLAGS"
        );
        return;
    }
    let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let script = Path::new(&dir).join("hot-text.ld");
    let script = script.display().to_string();
    if script.contains(',') {
        // -Wl, splits its argument at commas.
        println!(
            "cargo:warning=the functions a start runs are not laid out together: \
             the path of server/hot-text.ld has a comma"
        );
        return;
    }
    println!("cargo:rustc-link-arg-bins=-Wl,-T,{script}");
}
