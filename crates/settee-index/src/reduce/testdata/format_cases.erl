%% Prints JSON values the way CouchDB 3.4.3 shows terms in _stats and _sum
%% errors: jiffy-decoded, then ~w, ~p at columns 1 and 84 (object members at
%% 47), couch_util:to_binary/1 and erlang:external_size/1. See gen_cases.py.
{ok, Bin} = file:read_file("cases.jsonl"),
Lines = binary:split(Bin, <<"\n">>, [global, trim_all]),
L1 = fun(B) -> unicode:characters_to_binary(binary_to_list(iolist_to_binary(B)), latin1, utf8) end,
P = fun(C, T) -> Pre = lists:duplicate(C-1, $x), S = iolist_to_binary(io_lib:format("~s~p", [Pre, T])), L1(binary:part(S, C-1, byte_size(S)-(C-1))) end,
Out = [begin
  T = jiffy:decode(L),
  W = io_lib:format("~w", [T]),
  Props = case T of {PL} when is_list(PL) -> P(47, PL); _ -> null end,
  jiffy:encode({[{json, L}, {w, L1(W)}, {p1, P(1, T)}, {p84, P(84, T)}, {props47, Props}, {to_binary, L1(couch_util:to_binary(T))}, {size, erlang:external_size(T)}]})
end || L <- Lines],
ok = file:write_file("otp25_terms.jsonl", [lists:join(<<"\n">>, Out), <<"\n">>]),
{ok, FB} = file:read_file("floats.txt"),
FL = binary:split(FB, <<"\n">>, [global, trim_all]),
FOut = [begin B = binary_to_integer(X), <<F/float>> = <<B:64>>, [X, <<" ">>, io_lib:format("~w", [F]), <<"\n">>] end || X <- FL],
ok = file:write_file("otp25_floats.txt", FOut),
halt().
