//! Arbitrary bytes as one client's stream: through the PDU framing and
//! limits, the BER decoder and every operation's dispatch, against one
//! shard over a database in a temporary directory. A panic, a hang or a
//! sanitizer report is a bug; the inputs that found them are kept as
//! regression tests in `tests/it/hostile/`.
#![no_main]

use libfuzzer_sys::fuzz_target;

thread_local! {
    static HARNESS: coredir::harness::Harness = coredir::harness::Harness::new().expect("the fuzz harness starts");
}

fuzz_target!(|data: &[u8]| {
    HARNESS.with(|h| h.feed(data));
});
