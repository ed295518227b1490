// deny: answers 403 "denied\n" (with `x-denied-by: filter`) when the request
// carries an `x-deny` header; otherwise lets the request through. Logs
// "deny filter saw <:path>" at info level for every request.
export * from "./abi";
import {
  RootContext, Context, registerRootContext,
  FilterHeadersStatusValues, stream_context, send_local_response,
  GrpcStatusValues, HeaderPair, Headers, log, LogLevelValues,
} from "@solo-io/proxy-runtime";

class DenyRoot extends RootContext {
  // The SDK's own onConfigure (0.1.8) mis-calls proxy_get_buffer_bytes (see
  // add_header.ts); this filter needs no configuration, so skip the read.
  onConfigure(configuration_size: u32): bool {
    return true;
  }

  createContext(context_id: u32): Context {
    return new Deny(context_id, this);
  }
}

function hasHeader(headers: Headers, name: string): bool {
  for (let i = 0; i < headers.length; i++) {
    if (String.UTF8.decode(headers[i].key).toLowerCase() == name) return true;
  }
  return false;
}

class Deny extends Context {
  constructor(context_id: u32, root_context: DenyRoot) {
    super(context_id, root_context);
  }

  onRequestHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    const path = stream_context.headers.request.get(":path");
    log(LogLevelValues.info, "deny filter saw " + path);
    // Presence, not value: an `x-deny` with an empty value also denies.
    if (!hasHeader(stream_context.headers.request.get_headers(), "x-deny")) {
      return FilterHeadersStatusValues.Continue;
    }
    const extra: Headers = [];
    extra.push(new HeaderPair(String.UTF8.encode("x-denied-by"), String.UTF8.encode("filter")));
    send_local_response(403, "denied by filter", String.UTF8.encode("denied\n"), extra,
      GrpcStatusValues.InvalidCode);
    return FilterHeadersStatusValues.StopIteration;
  }
}

function factory(context_id: u32): RootContext { return new DenyRoot(context_id); }
registerRootContext(factory, "deny");
registerRootContext(factory, "");
