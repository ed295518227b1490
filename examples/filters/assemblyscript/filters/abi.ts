// The SDK's callbacks, as every filter here exports them: unchanged, with
// the SDK's own ABI marker (`proxy_abi_version_0_2_0`), which hoard runs.
export * from "@solo-io/proxy-runtime/proxy";
