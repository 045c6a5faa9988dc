//! Compiles `proto/profile.proto` into Rust types at build time. protox parses the schema in
//! pure Rust, so no `protoc` binary is needed on any machine that builds heapwatch.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/profile.proto");
    let descriptors = protox::compile(["proto/profile.proto"], ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
