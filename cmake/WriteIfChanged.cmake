# write_if_changed(PATH TEXT): writes TEXT to PATH unless PATH already holds exactly TEXT, so a
# generated header changes (and recompiles what includes it) only when its content does.
function(write_if_changed path text)
  set(old "")
  if(EXISTS "${path}")
    file(READ "${path}" old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE "${path}" "${text}")
  endif()
endfunction()
