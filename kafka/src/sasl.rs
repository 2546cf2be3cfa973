//! The client side of SASL as Kafka uses it (KIP-43, KIP-84), for the raw
//! connection of the driver's `EndTxn` (`wire`): PLAIN (RFC 4616) and
//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677). Bytes in, bytes
//! out; no sockets. krafka does the same for every other connection.
//!
//! ```text
//!  PLAIN   plain(user, password)                     \0user\0password
//!  SCRAM   Scram::new(mechanism, user, password)
//!            client_first()                   ─►  n,,n=user,r=<nonce>
//!            client_final(server_first)       ◄─  r=<nonce+server's>,s=<salt>,i=<n>
//!                                             ─►  c=biws,r=..,p=<proof>
//!            verify_server_final(server_final) ◄─  v=<signature> | e=<error>
//! ```
//!
//! As Kafka's own client: no channel binding (`n,,`), the user name
//! escaped (`,` as `=2C`, `=` as `=3D`), the password as its UTF-8 bytes
//! (no SASLprep). The broker must extend the client's nonce, ask for 4096
//! to 1,000,000 iterations (Kafka's least; the most keeps a rogue broker
//! from stalling the driver), and prove it knows the password with its
//! signature, checked in constant time. The hashes are ring's, the crypto
//! of the rest of Sluice. Errors are text without the password.

use std::num::NonZeroU32;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::rand::SecureRandom;
use ring::{digest, hmac, pbkdf2};
use zeroize::Zeroizing;

/// The fewest iterations accepted: Kafka's own minimum.
pub(super) const MIN_ITERATIONS: u32 = 4096;
/// The most accepted.
pub(super) const MAX_ITERATIONS: u32 = 1_000_000;

/// PLAIN's one message: no authorization id, the user, the password.
pub(super) fn plain(user: &str, password: &str) -> Zeroizing<Vec<u8>> {
    let mut bytes = Zeroizing::new(Vec::with_capacity(user.len() + password.len() + 2));
    bytes.push(0);
    bytes.extend_from_slice(user.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(password.as_bytes());
    bytes
}

/// The hash of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    fn name(self) -> &'static str {
        match self {
            ScramHash::Sha256 => "SCRAM-SHA-256",
            ScramHash::Sha512 => "SCRAM-SHA-512",
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            ScramHash::Sha256 => &digest::SHA256,
            ScramHash::Sha512 => &digest::SHA512,
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            ScramHash::Sha256 => hmac::HMAC_SHA256,
            ScramHash::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            ScramHash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            ScramHash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }
}

/// One SCRAM exchange, client side.
pub(super) struct Scram {
    hash: ScramHash,
    password: Zeroizing<Vec<u8>>,
    nonce: String,
    /// `n=<user>,r=<nonce>`: the client-first message without its header.
    first_bare: String,
    /// After `client_final`: the server key and the auth message, to check
    /// the server's signature with.
    expect: Option<(hmac::Key, Vec<u8>)>,
}

impl std::fmt::Debug for Scram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scram")
            .field("mechanism", &self.hash.name())
            .field("first_bare", &self.first_bare)
            .finish_non_exhaustive()
    }
}

impl Scram {
    /// A new exchange for `user` with a fresh random nonce.
    pub fn new(hash: ScramHash, user: &str, password: &str) -> Result<Scram, String> {
        let mut random = [0u8; 24];
        ring::rand::SystemRandom::new()
            .fill(&mut random)
            .map_err(|_| "no random bytes for the SCRAM nonce".to_string())?;
        Ok(Scram::with_nonce(
            hash,
            user,
            password,
            &BASE64.encode(random),
        ))
    }

    /// An exchange with the nonce given (tests).
    pub fn with_nonce(hash: ScramHash, user: &str, password: &str, nonce: &str) -> Scram {
        let user = user.replace('=', "=3D").replace(',', "=2C");
        Scram {
            hash,
            password: Zeroizing::new(password.as_bytes().to_vec()),
            nonce: nonce.to_string(),
            first_bare: format!("n={user},r={nonce}"),
            expect: None,
        }
    }

    /// The client-first message: no channel binding, then the bare part.
    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.first_bare).into_bytes()
    }

    /// The client-final message, with the proof that the client knows the
    /// password, answering `server_first`.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let name = self.hash.name();
        let text = std::str::from_utf8(server_first)
            .map_err(|_| format!("the broker's first {name} message is not UTF-8"))?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in text.split(',') {
            match attr.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = Some(v),
                Some(("m", _)) => {
                    return Err(format!(
                        "the broker asks for a {name} extension this client does not know"
                    ));
                }
                Some(("e", v)) => return Err(format!("the broker refused: {v}")),
                _ => {}
            }
        }
        let missing = |what: &str| format!("the broker's first {name} message has no {what}");
        let nonce = nonce.ok_or_else(|| missing("nonce"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(format!(
                "the broker's {name} nonce does not extend this client's"
            ));
        }
        let salt = BASE64
            .decode(salt.ok_or_else(|| missing("salt"))?)
            .map_err(|_| format!("the broker's {name} salt is not base64"))?;
        let iterations: u32 = iterations
            .ok_or_else(|| missing("iteration count"))?
            .parse()
            .map_err(|_| format!("the broker's {name} iteration count is not a number"))?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!(
                "the broker asks for {iterations} {name} iterations; this client takes \
                 {MIN_ITERATIONS} to {MAX_ITERATIONS}"
            ));
        }
        let iterations = NonZeroU32::new(iterations).expect("at least MIN_ITERATIONS");

        let h = self.hash;
        let mut salted = Zeroizing::new(vec![0u8; h.digest().output_len()]);
        pbkdf2::derive(h.pbkdf2(), iterations, &salt, &self.password, &mut salted);
        let salted = hmac::Key::new(h.hmac(), &salted);
        let client_key = Zeroizing::new(hmac::sign(&salted, b"Client Key").as_ref().to_vec());
        let server_key = hmac::sign(&salted, b"Server Key");
        let stored_key = digest::digest(h.digest(), &client_key);

        // c=biws: the base64 of the header "n,," (no channel binding).
        let final_bare = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{text},{final_bare}", self.first_bare).into_bytes();
        let signature = hmac::sign(
            &hmac::Key::new(h.hmac(), stored_key.as_ref()),
            &auth_message,
        );
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature.as_ref())
            .map(|(k, s)| k ^ s)
            .collect();
        self.expect = Some((hmac::Key::new(h.hmac(), server_key.as_ref()), auth_message));
        Ok(format!("{final_bare},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the broker's signature, which only
    /// a broker that knows the password can make; or its error.
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let name = self.hash.name();
        let (server_key, auth_message) = self
            .expect
            .as_ref()
            .ok_or_else(|| format!("{name}: the final message came before the first"))?;
        let text = String::from_utf8_lossy(server_final);
        let mut verifier = None;
        for attr in text.split(',') {
            match attr.split_once('=') {
                Some(("e", v)) => return Err(format!("the broker refused: {v}")),
                Some(("v", v)) => verifier = Some(v),
                _ => {}
            }
        }
        let verifier = verifier
            .ok_or_else(|| format!("the broker's final {name} message has no signature"))?;
        let signature = BASE64
            .decode(verifier)
            .map_err(|_| format!("the broker's {name} signature is not base64"))?;
        hmac::verify(server_key, auth_message, &signature).map_err(|_| {
            format!(
                "the broker's {name} signature is wrong: it does not know this user's \
                 password (not the broker expected?)"
            )
        })
    }
}
