// echo_props: sets request header `x-props: <path>|<method>|<address>|<root_id>`
// from the host properties request.path, request.method, source.address and
// plugin_root_id.
export * from "./abi";
import {
  RootContext, Context, registerRootContext,
  FilterHeadersStatusValues, stream_context,
} from "@solo-io/proxy-runtime";
import { get_property } from "@solo-io/proxy-runtime/runtime";

// Property paths are sent the way the other Proxy-Wasm SDKs and Envoy encode
// them: segments separated by NUL ("request\0path"). The SDK's get_property
// passes the string through unchanged, and aborts the VM (proc_exit 255) when
// the host answers anything but OK, so the host must know all four.
function prop(path: string): string {
  return String.UTF8.decode(get_property(path));
}

class EchoPropsRoot extends RootContext {
  // The SDK's own onConfigure (0.1.8) mis-calls proxy_get_buffer_bytes (see
  // add_header.ts); this filter needs no configuration, so skip the read.
  onConfigure(configuration_size: u32): bool {
    return true;
  }

  createContext(context_id: u32): Context {
    return new EchoProps(context_id, this);
  }
}

class EchoProps extends Context {
  constructor(context_id: u32, root_context: EchoPropsRoot) {
    super(context_id, root_context);
  }

  onRequestHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    const value = prop("request\0path") + "|" + prop("request\0method") + "|" +
      prop("source\0address") + "|" + prop("plugin_root_id");
    stream_context.headers.request.replace("x-props", value);
    return FilterHeadersStatusValues.Continue;
  }
}

function factory(context_id: u32): RootContext { return new EchoPropsRoot(context_id); }
registerRootContext(factory, "echo_props");
registerRootContext(factory, "");
