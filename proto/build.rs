fn main() -> Result<(), Box<dyn std::error::Error>> {
    // protoc comes from Debian's protobuf-compiler (installed by `make deps`).
    tonic_build::configure()
        // Shared buffers: a retried or in-process call hands the command on without
        // copying a 100 KiB insert batch.
        .bytes([".bulwark.shard.v1.CommandRequest.command"])
        .compile_protos(&["proto/shard.proto", "proto/raft.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/shard.proto");
    println!("cargo:rerun-if-changed=proto/raft.proto");
    Ok(())
}
