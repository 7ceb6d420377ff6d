//! Puts the directory koila-sys linked libkoila.so from into the rpath of this crate's tests
//! and examples. A binary crate using koila does the same with two lines in its build.rs
//! (see the README), or relies on libkoila.so being installed where the loader looks.
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_KOILA_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_KOILA_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
