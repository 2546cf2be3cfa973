//! Compiles `sluice.proto` into Rust, with a file descriptor set for server
//! reflection.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("sluice_descriptor.bin"))
        .compile_protos(&["sluice.proto"], &["."])?;
    println!("cargo:rerun-if-changed=sluice.proto");
    Ok(())
}
