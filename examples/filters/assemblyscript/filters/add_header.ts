// add_header: adds `x-filter: <plugin configuration>` to every response.
export * from "./abi";
import {
  RootContext, Context, registerRootContext,
  FilterHeadersStatusValues, stream_context,
} from "@solo-io/proxy-runtime";
import { get_buffer_bytes, BufferTypeValues } from "@solo-io/proxy-runtime/runtime";

class AddHeaderRoot extends RootContext {
  config: string = "";

  // The SDK's own onConfigure (0.1.8) passes `configuration_size` as the
  // return-size *pointer* of proxy_get_buffer_bytes, so the host writes into
  // low memory and the SDK reads a stale size. Read the buffer correctly here.
  onConfigure(configuration_size: u32): bool {
    this.config = configuration_size == 0
      ? ""
      : String.UTF8.decode(get_buffer_bytes(BufferTypeValues.PluginConfiguration, 0, configuration_size));
    return true;
  }

  createContext(context_id: u32): Context {
    return new AddHeader(context_id, this);
  }
}

class AddHeader extends Context {
  constructor(context_id: u32, root_context: AddHeaderRoot) {
    super(context_id, root_context);
  }

  onRequestHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    return FilterHeadersStatusValues.Continue;
  }

  onResponseHeaders(headers: u32, end_of_stream: bool): FilterHeadersStatusValues {
    const root = this.root_context as AddHeaderRoot;
    stream_context.headers.response.add("x-filter", root.config);
    return FilterHeadersStatusValues.Continue;
  }
}

function factory(context_id: u32): RootContext { return new AddHeaderRoot(context_id); }
// The SDK picks the root context by the host's `plugin_root_id` property:
// accept both the filter's name and an empty root id.
registerRootContext(factory, "add_header");
registerRootContext(factory, "");
