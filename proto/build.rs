fn main() -> Result<(), Box<dyn std::error::Error>> {
    // protoc comes from Debian's protobuf-compiler (installed by `make deps`).
    tonic_build::configure()
        .compile_protos(&["proto/shard.proto", "proto/raft.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/shard.proto");
    println!("cargo:rerun-if-changed=proto/raft.proto");
    Ok(())
}
