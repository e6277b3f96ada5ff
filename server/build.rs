//! Release builds for Linux link with `hot-text.ld`, which puts the
//! functions a start and a first request run together at the front of the
//! code: an idle server then maps 3 MiB of code where it mapped 8
//! (scripts/hot-text; docs/benchmarks.md, "Idle footprint"). GNU ld, lld and
//! zig's linker read it. Debug builds leave it out: lld matches its 3,000
//! patterns against a debug build's sections in 53 s. `RKLLM_HOT_TEXT=0`
//! leaves it out too, for a linker that takes no linker scripts (mold) and
//! for the build `scripts/hot-text profile` profiles.

use std::env;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=hot-text.ld");
    println!("cargo:rerun-if-env-changed=RKLLM_HOT_TEXT");
    let release = env::var("PROFILE").is_ok_and(|p| p == "release");
    let linux = env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let wanted = env::var("RKLLM_HOT_TEXT").as_deref() != Ok("0");
    if release && linux && wanted {
        let dir = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
        let script = Path::new(&dir).join("hot-text.ld");
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{}", script.display());
    }
}
