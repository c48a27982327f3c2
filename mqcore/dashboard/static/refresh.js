// Auto-refresh of a page's cards and tables: every 5 s while the box is ticked (kept in
// localStorage, so it holds across pages), the page's own address is fetched again and each
// table.grid and .cards block with an id (or in the same position) is swapped for the fresh
// one. Forms are never touched (a half-typed field survives, and a table inside a form, such as
// the search results' checkboxes, keeps its selection), and a failed fetch skips a round.
(function () {
  var box = document.getElementById("autorefresh");
  if (!box) return;
  box.checked = localStorage.getItem("mqcore-autorefresh") === "on";
  var SEL = "main table.grid:not(form table), main .cards";
  function swap() {
    if (!box.checked) return;
    fetch(location.href, {credentials: "same-origin", headers: {"X-Requested-With": "refresh"}})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (text) {
        if (!text) return;
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelectorAll(SEL);
        var old = document.querySelectorAll(SEL);
        for (var i = 0; i < old.length && i < fresh.length; i++) {
          var f = old[i].id ? fresh[i].ownerDocument.getElementById(old[i].id) : fresh[i];
          if (f) old[i].replaceWith(document.importNode(f, true));
        }
        document.body.dataset.refreshed = String(Date.now());
      })
      .catch(function () {});
  }
  box.addEventListener("change", function () {
    localStorage.setItem("mqcore-autorefresh", box.checked ? "on" : "off");
  });
  setInterval(swap, 5000);
})();
