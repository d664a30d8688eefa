
// hourglass: warm-up (appended by hourglass build to the bindings componentize-js
// generates; see builder/src/js.rs). Wizer snapshots the component after this
// script and the handler's module have run, and every job starts from that
// snapshot. What a job's call touches for the first time would otherwise be
// built again in every fresh instance: the Promise and async-function
// machinery (the bindings' export is an async function), BigInt, typed arrays
// over the instance's memory and the views the bindings cache. Done once here,
// a fresh JavaScript instance's job costs about a third as much.
;(() => {
  (async () => { await null; })();
  BigInt.asUintN(64, BigInt(0));
  if (typeof $memory === 'object') {
    if (typeof dataView === 'function') dataView($memory);
    new Uint8Array($memory.buffer.slice(0, 0));
    const none = new Uint8Array($memory.buffer, 0, 0);
    if (typeof TEXT_DECODER_UTF8 === 'object') TEXT_DECODER_UTF8.decode(none);
  }
})();
