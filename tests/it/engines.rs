//! The whole integration suite against the second storage engine: this
//! test runs the test binary again with `COREDIR_TEST_ENGINE=sled`, so
//! `cargo test` covers both engines with one command.

#[test]
fn the_suite_passes_on_sled() {
    if std::env::var("COREDIR_TEST_ENGINE").is_ok() {
        return; // already the inner run
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env("COREDIR_TEST_ENGINE", "sled")
        .args(["--skip", "engines::", "--test-threads", "4"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Only what the failing tests printed: the whole output (every server's
    // log on stderr, every passing test's line) buries it where a CI log
    // is cut short.
    let failures = text.find("\nfailures:\n").map_or(&text[..], |at| &text[at..]);
    assert!(out.status.success(), "the suite failed on sled:\n{failures}");
    assert!(text.contains("test result: ok"), "{text}");
}
