//! Rebuild when the bundled config directory changes (it is embedded with `include_dir!`).
fn main() {
    println!("cargo:rerun-if-changed=../infra/config");
}
