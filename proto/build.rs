fn main() -> Result<(), Box<dyn std::error::Error>> {
    // protoc comes from Debian's protobuf-compiler (installed by `make deps`).
    tonic_build::configure()
        // Shared buffers: a retried or in-process call hands the command on without
        // copying a 100 KiB insert batch, and Raft messages are parsed straight from the
        // received buffer (their entries' data stays a slice of it, not two copies).
        .bytes([
            ".bulwark.shard.v1.CommandRequest.command",
            ".bulwark.raft.v1.RaftBatch.messages",
        ])
        .compile_protos(&["proto/shard.proto", "proto/raft.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/shard.proto");
    println!("cargo:rerun-if-changed=proto/raft.proto");
    Ok(())
}
