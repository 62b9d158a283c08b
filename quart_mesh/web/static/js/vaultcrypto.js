// The vault's client-side format v2, with WebCrypto (docs/vault.md, decision
// 0048). No DOM: the vault and bots views use it, and so can any module.
//
//   v2.<iterations>.<salt>.<nonce>.<ciphertext+tag>   (base64url, no padding)
//
// key: PBKDF2-HMAC-SHA256(passphrase UTF-8, salt 16 bytes, iterations) → 32
// bytes; AES-256-GCM, nonce 12 bytes, 16-byte tag appended; associated data
// "quart-mesh-vault:v2:" + label (UTF-8), so a blob opens only under its label.
// The Python client (quart_mesh.vault_client) writes and reads the same.
// Format v1 (scrypt, which WebCrypto lacks) is recognised but not opened here.
//
// Nothing here keeps a passphrase, a key or a plaintext: they live in the
// caller's variables for the length of one call.

export const VERSION = "v2";
/** PBKDF2 rounds written into new blobs (OWASP's figure for SHA-256). */
export const ITERATIONS = 600000;
/** The counts a blob may carry (as the Python client): fewer is not ours,
 * more would let a forged blob keep the page busy for minutes. */
export const MIN_ITERATIONS = 100000;
export const MAX_ITERATIONS = 10000000;

const SALT_BYTES = 16;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;

/**
 * A blob that cannot be opened. `code`: `old_format` (a v1 blob: open it with
 * the Python client, or save it again), `malformed` (not a vault blob),
 * `wrong_passphrase` (the passphrase or label is wrong or the blob altered:
 * these cannot be told apart), `unavailable` (no WebCrypto: the page is not
 * a secure context).
 */
export class VaultError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "VaultError";
    this.code = code;
  }
}

/** WebCrypto is there (it is only in secure contexts: HTTPS or loopback). */
export function available() {
  return Boolean(globalThis.crypto && globalThis.crypto.subtle);
}

/** The format of *blob*: "v1", "v2", or null. */
export function versionOf(blob) {
  const version = String(blob).split(".", 1)[0];
  return version === "v1" || version === "v2" ? version : null;
}

function b64(bytes) {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function unb64(text) {
  if (!/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) {
    throw new VaultError("malformed", "This is not a vault entry this page can read.");
  }
  const binary = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

const utf8 = (text) => new TextEncoder().encode(text);
const aad = (label) => utf8(`quart-mesh-vault:${VERSION}:${label}`);

function subtle() {
  if (!available()) {
    throw new VaultError(
      "unavailable",
      "This browser offers no WebCrypto here: open the page over HTTPS (or on this machine).",
    );
  }
  return globalThis.crypto.subtle;
}

async function deriveKey(passphrase, salt, iterations) {
  if (!passphrase) throw new VaultError("no_passphrase", "Enter the passphrase.");
  const base = await subtle().importKey("raw", utf8(passphrase), "PBKDF2", false, ["deriveKey"]);
  return subtle().deriveKey(
    { name: "PBKDF2", hash: "SHA-256", salt, iterations },
    base,
    { name: "AES-GCM", length: 256 },
    false,
    ["encrypt", "decrypt"],
  );
}

function checkIterations(iterations) {
  if (!Number.isInteger(iterations) || iterations < MIN_ITERATIONS || iterations > MAX_ITERATIONS) {
    throw new VaultError("malformed", "The entry's iteration count is out of range.");
  }
}

/**
 * Seal *plaintext* for storing under *label*: the blob for
 * `POST /api/vault/entries`. *salt* and *nonce* are for tests only (known
 * answers); leave them out.
 */
export async function encrypt(plaintext, passphrase, label, options = {}) {
  const iterations = options.iterations ?? ITERATIONS;
  checkIterations(iterations);
  const salt = options.salt ?? crypto.getRandomValues(new Uint8Array(SALT_BYTES));
  const nonce = options.nonce ?? crypto.getRandomValues(new Uint8Array(NONCE_BYTES));
  const key = await deriveKey(passphrase, salt, iterations);
  const sealed = await subtle().encrypt(
    { name: "AES-GCM", iv: nonce, additionalData: aad(label), tagLength: 128 },
    key,
    utf8(plaintext),
  );
  return [VERSION, String(iterations), b64(salt), b64(nonce), b64(new Uint8Array(sealed))].join(".");
}

/** The plaintext sealed in a v2 *blob* under *label*; throws VaultError. */
export async function decrypt(blob, passphrase, label) {
  const parts = String(blob).split(".");
  if (parts[0] === "v1") {
    throw new VaultError(
      "old_format",
      "This entry is in the old format (v1, scrypt), which a browser cannot open. " +
        "Open it with the Python vault client (quart_mesh.vault_client), or save the secret again here.",
    );
  }
  if (parts[0] !== VERSION || parts.length !== 5 || !/^[1-9][0-9]{0,8}$/.test(parts[1])) {
    throw new VaultError("malformed", "This is not a vault entry this page can read.");
  }
  const iterations = Number(parts[1]);
  checkIterations(iterations);
  const [salt, nonce, sealed] = parts.slice(2).map(unb64);
  if (salt.length !== SALT_BYTES || nonce.length !== NONCE_BYTES || sealed.length < TAG_BYTES) {
    throw new VaultError("malformed", "This is not a vault entry this page can read.");
  }
  const key = await deriveKey(passphrase, salt, iterations);
  let plain;
  try {
    plain = await subtle().decrypt(
      { name: "AES-GCM", iv: nonce, additionalData: aad(label), tagLength: 128 },
      key,
      sealed,
    );
  } catch {
    throw new VaultError(
      "wrong_passphrase",
      "Wrong passphrase (or the entry was altered): it does not open.",
    );
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(plain);
  } catch {
    throw new VaultError("malformed", "The entry does not hold text.");
  }
}
