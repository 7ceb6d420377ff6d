//! Finds libkoila.so and links it.
//!
//! Where it looks, first hit wins:
//! 1. `KOILA_LIB_DIR`: the directory holding libkoila.so (a CMake build dir, for instance);
//! 2. `KOILA_PREFIX`: an install prefix (`cmake --install build --prefix DIR`), searched in
//!    `lib`, `lib64` and `lib/<multiarch>`;
//! 3. the CMake build of this checkout (`<repo>/build`, as `scripts/build.sh` makes it);
//! 4. `pkg-config --variable=libdir koila`, when pkg-config knows koila;
//! 5. the system library directories.
//!
//! The directory is put in the rpath of this crate's own test and example binaries, and
//! handed to dependents as `DEP_KOILA_LIB_DIR` (the `koila` crate does the same with it).
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIB: &str = "libkoila.so";

fn has_lib(dir: &Path) -> bool {
    dir.join(LIB).exists()
}

fn multiarch() -> Option<String> {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").ok()?;
    let os = env::var("CARGO_CFG_TARGET_OS").ok()?;
    let env_ = env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    Some(format!("{arch}-{os}-{env_}"))
}

fn from_prefix(prefix: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![prefix.join("lib"), prefix.join("lib64")];
    if let Some(triple) = multiarch() {
        dirs.push(prefix.join("lib").join(triple));
    }
    dirs
}

fn first_with_lib(dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter().find(|d| has_lib(d)).cloned()
}

fn list(dirs: &[PathBuf]) -> String {
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn from_pkg_config() -> Option<PathBuf> {
    let out = Command::new("pkg-config").args(["--variable=libdir", "koila"]).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

fn main() {
    for var in ["KOILA_LIB_DIR", "KOILA_PREFIX", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());

    let found = if let Some(dir) = env::var_os("KOILA_LIB_DIR") {
        // An explicit choice is never second-guessed: a wrong one is an error.
        let dir = PathBuf::from(dir);
        if !has_lib(&dir) {
            panic!("koila-sys: KOILA_LIB_DIR={} holds no {LIB}", dir.display());
        }
        dir
    } else if let Some(prefix) = env::var_os("KOILA_PREFIX") {
        let dirs = from_prefix(Path::new(&prefix));
        first_with_lib(&dirs).unwrap_or_else(|| {
            panic!("koila-sys: KOILA_PREFIX={} has no {LIB} in {}", Path::new(&prefix).display(), list(&dirs))
        })
    } else {
        let mut candidates = vec![manifest.join("../../../build")];
        candidates.extend(from_pkg_config());
        candidates.push(PathBuf::from("/usr/local/lib"));
        if let Some(triple) = multiarch() {
            candidates.push(Path::new("/usr/lib").join(triple));
        }
        candidates.push(PathBuf::from("/usr/lib"));
        first_with_lib(&candidates).unwrap_or_else(|| {
            panic!(
                "koila-sys: cannot find {LIB}. Build koila (scripts/build.sh) or install it, \
                 then set KOILA_LIB_DIR=<dir with {LIB}> or KOILA_PREFIX=<install prefix>. \
                 Looked in: {}",
                list(&candidates)
            )
        })
    };
    let dir = found.canonicalize().unwrap_or(found);
    println!("cargo:rerun-if-changed={}", dir.join(LIB).display());
    println!("cargo:rustc-link-search=native={}", dir.display());
    println!("cargo:rustc-link-lib=dylib=koila");
    // This crate's own tests find the library without LD_LIBRARY_PATH...
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    // ...and dependents learn where it is (DEP_KOILA_LIB_DIR in their build scripts).
    println!("cargo:lib_dir={}", dir.display());
    println!("cargo:rustc-env=KOILA_SYS_LIB_DIR={}", dir.display());
}
