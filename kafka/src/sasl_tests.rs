//! Tests of the SASL client (`sasl`) without sockets: RFC 7677's
//! SCRAM-SHA-256 example byte for byte, the same exchange with SHA-512
//! (computed independently with Python's `hashlib`, whose SHA-256 output
//! for it is RFC 7677's), and what a rogue or mistaken broker may send.

use super::sasl::{MAX_ITERATIONS, Scram, ScramHash, plain};

/// RFC 7677 section 3: user "user", password "pencil".
const NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";

fn exchange(hash: ScramHash) -> Scram {
    Scram::with_nonce(hash, "user", "pencil", NONCE)
}

#[test]
fn scram_sha_256_is_rfc_7677s_example() {
    let mut s = exchange(ScramHash::Sha256);
    assert_eq!(s.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
    let last = s.client_final(SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(
        String::from_utf8(last).unwrap(),
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
         p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    );
    s.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
        .unwrap();
}

#[test]
fn scram_sha_512_matches_an_independent_computation() {
    // python3: hashlib.pbkdf2_hmac("sha512", b"pencil", salt, 4096), then
    // RFC 5802's ClientProof and ServerSignature with hmac/sha512.
    let mut s = exchange(ScramHash::Sha512);
    let last = s.client_final(SERVER_FIRST.as_bytes()).unwrap();
    assert_eq!(
        String::from_utf8(last).unwrap(),
        "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
         p=gMGXRcevScNtxZ6/8lQYpGtnsNAc3mGcmNomv+xnoOMw+3R2xNJdMNnzMlTN8PPC6wdp6dybEmDYXYTxwnYPJQ=="
    );
    s.verify_server_final(
        b"v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0vSVlKDanekLtifDSeVGT4+5ZxXnJq199RVG2rR7N7Zw==",
    )
    .unwrap();
}

#[test]
fn a_wrong_server_signature_or_an_error_is_refused() {
    let mut s = exchange(ScramHash::Sha256);
    s.client_final(SERVER_FIRST.as_bytes()).unwrap();
    // The SHA-512 signature is not the SHA-256 one.
    let err = s.verify_server_final(b"v=ZQnYEgWQMFmmsM8aQMF0nDDCy/AgCzkwk8CmMZYcMg0=");
    assert!(err.unwrap_err().contains("signature is wrong"));
    let err = s.verify_server_final(b"e=invalid-proof").unwrap_err();
    assert_eq!(err, "the broker refused: invalid-proof");
    let err = s.verify_server_final(b"x=1").unwrap_err();
    assert!(err.contains("no signature"), "{err}");
    // A final message before the first exchange.
    let err = exchange(ScramHash::Sha256)
        .verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
        .unwrap_err();
    assert!(err.contains("before the first"), "{err}");
}

#[test]
fn a_rogue_server_first_message_is_refused() {
    let refused = |server_first: &str| {
        exchange(ScramHash::Sha512)
            .client_final(server_first.as_bytes())
            .unwrap_err()
    };
    // A nonce that does not extend the client's, or only repeats it.
    assert!(refused("r=other,s=QSXCR+Q6sek8bf92,i=4096").contains("nonce"));
    assert!(refused(&format!("r={NONCE},s=QSXCR+Q6sek8bf92,i=4096")).contains("nonce"));
    // Too few iterations (a weaker proof), or so many the driver stalls.
    let low = refused(&format!("r={NONCE}x,s=QSXCR+Q6sek8bf92,i=1"));
    assert!(low.contains("asks for 1 SCRAM-SHA-512 iterations"), "{low}");
    let high = refused(&format!(
        "r={NONCE}x,s=QSXCR+Q6sek8bf92,i={}",
        MAX_ITERATIONS + 1
    ));
    assert!(high.contains("iterations"), "{high}");
    assert!(refused(&format!("r={NONCE}x,s=QSXCR+Q6sek8bf92")).contains("iteration count"));
    assert!(refused(&format!("r={NONCE}x,s=%%%,i=4096")).contains("not base64"));
    assert!(refused(&format!("m=ext,r={NONCE}x,s=QSXCR+Q6sek8bf92,i=4096")).contains("extension"));
    assert_eq!(
        refused("e=unknown-user"),
        "the broker refused: unknown-user"
    );
}

#[test]
fn names_are_escaped_and_nonces_are_fresh() {
    let s = Scram::with_nonce(ScramHash::Sha256, "a=b,c", "pw", "N");
    assert_eq!(s.client_first(), b"n,,n=a=3Db=2Cc,r=N");
    let a = Scram::new(ScramHash::Sha256, "u", "pw")
        .unwrap()
        .client_first();
    let b = Scram::new(ScramHash::Sha256, "u", "pw")
        .unwrap()
        .client_first();
    assert_ne!(a, b);
    let text = String::from_utf8(a).unwrap();
    let nonce = text.strip_prefix("n,,n=u,r=").unwrap();
    assert_eq!(nonce.len(), 32, "24 random bytes in base64: {nonce}");
    assert!(!nonce.contains(','), "{nonce}");
}

#[test]
fn a_scram_exchange_never_prints_the_password() {
    let s = Scram::with_nonce(ScramHash::Sha256, "u", "s3cret-pw", "N");
    assert!(!format!("{s:?}").contains("s3cret-pw"));
}

#[test]
fn plain_is_authzid_user_password_separated_by_nul() {
    assert_eq!(plain("alice", "pw").as_slice(), b"\0alice\0pw");
    assert_eq!(plain("", "").as_slice(), b"\0\0");
}
