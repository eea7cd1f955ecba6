pub mod callback;
pub mod file_persisted;
pub mod wal_record;

pub(crate) mod atomic_flush_metrics;
pub(crate) mod batch_metrics;
mod chunked_wal;
mod closed_chunk_reader;
pub(crate) mod file_entry;
mod flush_client;
pub(crate) mod flush_request;
pub(crate) mod flush_worker;
pub(crate) mod queued_bytes;
pub(crate) mod queued_write;
pub(crate) mod write_batch;

pub use chunked_wal::ChunkedWal;
pub use closed_chunk_reader::ClosedChunkReader;
pub use flush_request::FlushStat;

pub use crate::wal::file_persisted::ChunkPersistedFn;
