// The node's public REST API, as any client uses it (docs/rest.md). The token
// travels only in the Authorization header, never in a URL.

import { sayBytes } from "./dom.js";

/** A refused or failed request: `status` (0 when the node could not be
 * reached), the node's stable `code`, its human `message`. */
export class ApiError extends Error {
  constructor(status, code, message, retryAfter = null) {
    super(sayBytes(message));
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }

  /** Worth trying again later, unchanged: the node was unreachable, busy or
   * limiting the rate. */
  get transient() {
    return this.status === 0 || this.status === 408 || this.status === 429 || this.status >= 500;
  }
}

/** Codes of a 401 that mean the token itself is no good any more. */
/** rooms per page of GET /api/rooms, and the most the client lists */
const ROOM_PAGE = 100;
const MAX_ROOMS = 5000;

export const SESSION_ENDED = new Set(["unauthorized", "invalid_token", "token_expired", "token_revoked"]);

export class Api {
  /**
   * @param {() => string|null} token the current token
   * @param {(error: ApiError) => void} onSessionEnded called when the node
   *   refuses the token (expired, signed out, participant removed)
   * @param {(error: ApiError) => void} onForbidden called when the node
   *   refuses an action to this participant (403: its role may have changed)
   */
  constructor(token, onSessionEnded, onForbidden = () => {}) {
    this.token = token;
    this.onSessionEnded = onSessionEnded;
    this.onForbidden = onForbidden;
  }

  headers(json) {
    const headers = { Accept: "application/json" };
    const token = this.token();
    if (token) headers.Authorization = `Bearer ${token}`;
    if (json) headers["Content-Type"] = "application/json";
    return headers;
  }

  /**
   * Send a request and resolve with the node's Response once it said yes
   * (2xx), for a caller that reads the body itself (a stream). A refusal
   * throws ApiError with the node's code and message (an OpenAI-shaped
   * `{"error": {"message", "code"}}` too); an abort through `signal`
   * throws the browser's AbortError as it is.
   */
  async open(method, path, body, { signal, accept } = {}) {
    let response;
    const headers = this.headers(body !== undefined);
    if (accept) headers.Accept = accept;
    try {
      response = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
        referrerPolicy: "no-referrer",
        signal,
      });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      throw new ApiError(0, "unreachable", "The node cannot be reached.");
    }
    if (response.ok) return response;
    let data = null;
    try {
      data = await response.json();
    } catch (error) {
      if (error.name === "AbortError") throw error;
    }
    const detail = data && data.error;
    const nested = detail && typeof detail === "object";
    const retry = response.headers.get("Retry-After");
    throw this.failed(
      new ApiError(
        response.status,
        (nested && detail.code) || (data && data.code) || "http_error",
        (nested ? detail.message : detail) || `The node answered ${response.status}.`,
        retry === null ? null : Number(retry),
      ),
    );
  }

  /** A request whose answer is JSON (null when it has no body). */
  async request(method, path, body, options = {}) {
    const response = await this.open(method, path, body, options);
    try {
      return await response.json();
    } catch (error) {
      if (error.name === "AbortError") throw error;
      return null;
    }
  }

  failed(error) {
    if (error.status === 401 && this.token() && SESSION_ENDED.has(error.code)) {
      this.onSessionEnded(error);
    } else if (error.status === 403 && this.token()) {
      this.onForbidden(error);
    }
    return error;
  }

  get(path) {
    return this.request("GET", path);
  }
  post(path, body = {}, options = {}) {
    return this.request("POST", path, body, options);
  }
  patch(path, body) {
    return this.request("PATCH", path, body);
  }
  put(path, body) {
    return this.request("PUT", path, body);
  }
  delete(path) {
    return this.request("DELETE", path);
  }

  /**
   * The mesh's rooms by name, page by page (`GET /api/rooms?limit=&cursor=`),
   * at most `most` of them.
   */
  async rooms(most = MAX_ROOMS) {
    const rooms = [];
    let cursor = null;
    do {
      const page = await this.roomPage(cursor);
      rooms.push(...page.rooms);
      cursor = page.nextCursor;
    } while (cursor !== null && rooms.length < most);
    return rooms.slice(0, most);
  }

  /** One page of rooms by name after `cursor` (null: the first): `{rooms, nextCursor}`. */
  roomPage(cursor = null) {
    const after = cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`;
    return this.get(`/api/rooms?limit=${ROOM_PAGE}${after}`);
  }

  /**
   * Upload a file (`POST /api/upload`, multipart field `file`), reporting
   * progress as a fraction 0..1. Resolves with the upload (`uploadId`, `url`…).
   */
  upload(file, onProgress, signal) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("POST", "/api/upload");
      const token = this.token();
      if (token) xhr.setRequestHeader("Authorization", `Bearer ${token}`);
      xhr.responseType = "json";
      xhr.upload.addEventListener("progress", (event) => {
        if (event.lengthComputable) onProgress(event.loaded / event.total);
      });
      xhr.addEventListener("load", () => {
        const data = xhr.response;
        if (xhr.status === 201 && data) {
          onProgress(1);
          resolve(data);
        } else {
          reject(
            this.failed(
              new ApiError(
                xhr.status,
                (data && data.code) || "http_error",
                (data && data.error) || `The upload failed (${xhr.status}).`,
              ),
            ),
          );
        }
      });
      xhr.addEventListener("error", () =>
        reject(new ApiError(0, "unreachable", "The node cannot be reached.")),
      );
      xhr.addEventListener("abort", () => reject(new ApiError(0, "aborted", "Upload cancelled.")));
      if (signal) signal.addEventListener("abort", () => xhr.abort());
      const form = new FormData();
      form.append("file", file, file.name);
      xhr.send(form);
    });
  }
}

/** Path segment, encoded. */
export const seg = (value) => encodeURIComponent(value);
