// A little keyboard help: "/" focuses the search box; "j"/"k" move through the rows of a
// listing and Enter opens the highlighted row's link.  Plain links and forms do the rest.
"use strict";
(function () {
  let current = -1;
  function rows() {
    return Array.from(document.querySelectorAll("table.listing tbody tr")).filter(
      (row) => row.querySelector("a")
    );
  }
  function typing(target) {
    return target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA");
  }
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) {
      return;
    }
    const search = document.getElementById("search");
    if (event.key === "/" && search) {
      event.preventDefault();
      search.focus();
      return;
    }
    if (event.key !== "j" && event.key !== "k") {
      return;
    }
    const all = rows();
    if (!all.length) {
      return;
    }
    if (current >= 0 && all[current]) {
      all[current].classList.remove("keyboard-current");
    }
    current = event.key === "j" ? Math.min(current + 1, all.length - 1) : Math.max(current - 1, 0);
    all[current].classList.add("keyboard-current");
    all[current].querySelector("a").focus();
  });
})();
