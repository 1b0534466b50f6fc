// The avatar page (/avatar/). A chat app or a phone's WebView sets its state with
//   window.postMessage({avatar: "thinking"}, "*")      (also accepted as a JSON string)
//   window.hermesAvatar.set("speaking")
// States: idle, thinking, speaking; anything else is shown as idle, as the gateway does (M3).
(function () {
  'use strict';
  var STATES = ['idle', 'thinking', 'speaking'];
  var LABELS = { idle: 'Hermes is idle', thinking: 'Hermes is thinking', speaking: 'Hermes is speaking' };
  var root = document.documentElement;
  var current = 'idle';
  var listeners = [];

  function set(state) {
    state = String(state == null ? '' : state).toLowerCase();
    if (STATES.indexOf(state) < 0) state = 'idle';
    if (state !== current || root.getAttribute('data-state') !== state) {
      current = state;
      root.setAttribute('data-state', state);
      var label = document.getElementById('avatar-label');
      if (label) label.textContent = LABELS[state];
      for (var i = 0; i < listeners.length; i++) {
        try { listeners[i](state); } catch (e) { /* a listener's own bug */ }
      }
    }
    return state;
  }

  window.hermesAvatar = Object.freeze({
    set: set,
    get: function () { return current; },
    onChange: function (fn) { if (typeof fn === 'function') listeners.push(fn); },
    states: STATES.slice(),
  });

  window.addEventListener('message', function (ev) {
    var d = ev.data;
    if (typeof d === 'string') {
      try { d = JSON.parse(d); } catch (e) { return; }
    }
    if (d && typeof d === 'object' && typeof d.avatar === 'string') set(d.avatar);
  });

  var m = /[?&]state=([a-z]+)/i.exec(location.search);
  set(m ? m[1] : 'idle');
})();
