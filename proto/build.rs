//! Compiles `sluice.proto` into Rust, with a file descriptor set for server
//! reflection.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out.join("sluice_descriptor.bin"))
        // Rare and 32 bytes: boxed, so that every task's report (and the
        // driver's enums that carry one) stays small.
        .boxed(".sluice.v1.TaskOutput.state_rebuild")
        .compile_protos(&["sluice.proto"], &["."])?;
    println!("cargo:rerun-if-changed=sluice.proto");
    Ok(())
}
